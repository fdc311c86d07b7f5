-- compat: -M extended
\startpipeline
SELECT 1;
SELECT 2;
\endpipeline
\set a debug(1)
