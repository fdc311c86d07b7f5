-- compat: -M prepared
SELECT 2 * ;
