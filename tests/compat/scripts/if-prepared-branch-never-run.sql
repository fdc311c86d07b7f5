-- compat: -M prepared -t 2
\set legacy 0
\if :legacy
SELECT * FROM compat_table_that_is_gone;
\else
SELECT 1;
\endif
\set d debug(2)
