-- compat: -M extended
\set vn NULL
\set vb false
\set vd 2.5
\set vx 1e20
SELECT :vn::text IS NULL AS n_null, :vn::text = 'NULL' AS n_text, :vb::text = 'false' AS b_text, :vd::text = '2.5' AS d_text, :vx::text = '1e+20' AS x_text \gset
\set a debug(:n_null)
\set b debug(:n_text)
\set c debug(:b_text)
\set d debug(:d_text)
\set e debug(:x_text)
