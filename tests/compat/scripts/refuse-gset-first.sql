\gset
SELECT 1;
