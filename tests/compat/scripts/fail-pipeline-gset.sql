-- compat: -M extended
\startpipeline
SELECT 1 AS one \gset
\endpipeline
