-- compat: -M extended -t 2
\set x 4
\startpipeline
SELECT :x;
SELECT :x + 1;
SELECT pg_sleep(0.001);
SELECT 5;
SELECT 6;
SELECT 7;
SELECT 8;
\endpipeline
\set a debug(:x)
