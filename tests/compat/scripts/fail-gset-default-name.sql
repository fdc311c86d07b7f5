-- compat: -M prepared
SELECT 1 + 1 \gset
