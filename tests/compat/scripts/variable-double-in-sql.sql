-- compat: -M extended
\set x 1.0 / 3
SELECT :x::numeric(10,4) AS y \gset
\set a debug(:y)
