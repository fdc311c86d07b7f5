-- compat: -M extended -t 4
\set r random(0, 1)
\if :r = 1
\startpipeline
\else
\startpipeline
\endif
SELECT 1;
\endpipeline
\set d debug(1)
