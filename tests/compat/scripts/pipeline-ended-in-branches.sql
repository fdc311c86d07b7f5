-- compat: -M extended -t 2
\startpipeline
SELECT 1;
\if true
\endpipeline
\else
\endpipeline
\endif
\set d debug(3)
