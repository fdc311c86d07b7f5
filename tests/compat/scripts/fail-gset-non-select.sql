-- compat: -M prepared
CREATE TEMP TABLE IF NOT EXISTS compat_gset_tmp (x int) \gset
