-- compat: -M prepared -c 2 -t 3
CREATE TYPE pg_temp.compat_e AS ENUM ('x', 'y'); DROP TYPE pg_temp.compat_e;
SELECT 1 AS first; SELECT 2 AS second \gset
\set a debug(:second)
