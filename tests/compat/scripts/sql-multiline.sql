SELECT
  1 + 1
  AS two
\gset
\set a debug(:two)
