-- compat: -M prepared
SELECT $$it's; "quoted" \ here$$ AS s \gset
SELECT length(:s) AS l, :s = $q$it's; "quoted" \ here$q$ AS same \gset
\set a debug(:l)
\set b debug(:same)
