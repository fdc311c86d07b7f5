-- compat: -M extended
SELECT 1;
\endpipeline
