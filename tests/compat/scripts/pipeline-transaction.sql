-- compat: -M prepared -c 3 -t 4
\startpipeline
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT 1;
SELECT 2;
SELECT 3;
END;
\endpipeline
\set a debug(:client_id >= 0)
