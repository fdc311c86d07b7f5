-- compat: -M prepared
SELECT 7 AS good, '7x' AS bad \gset
SELECT :good::smallint, :bad::smallint;
