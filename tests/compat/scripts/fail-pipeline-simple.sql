-- compat: -M simple
\startpipeline
SELECT 1;
\endpipeline
