-- compat: -M prepared -t 2
CREATE TEMP TABLE IF NOT EXISTS compat_tt (a int);
INSERT INTO compat_tt VALUES (1);
SELECT count(*) AS n FROM compat_tt \gset
\set d debug(:n)
