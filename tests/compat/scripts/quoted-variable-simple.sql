-- compat: -M simple
\set x 5
SELECT ':x' AS q \gset
\set a debug(:q)
