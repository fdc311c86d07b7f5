-- compat: -M extended
\startpipeline
SELECT 1;
