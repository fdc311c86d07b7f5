-- compat: -M extended
SELECT :nosuch::int IS NULL AS isnull \gset
\set a debug(:isnull)
