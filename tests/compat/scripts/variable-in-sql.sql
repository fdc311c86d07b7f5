-- compat: -M prepared
\set x 6
SELECT :x * 7 AS y \gset
\set a debug(:y)
