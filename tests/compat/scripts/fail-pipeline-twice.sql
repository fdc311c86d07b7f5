-- compat: -M extended
\startpipeline
\startpipeline
SELECT 1;
\endpipeline
