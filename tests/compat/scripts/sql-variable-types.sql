\set vn NULL
\set vb TRUE
\set vi 5432
\set vd -54.21E-2
\set vt 1.0 / 3
\set vg 1e20
SELECT :vn IS NULL AS a, :vb AS b, :vi + 1 AS c, :vd * 2 AS d, ':vt' AS t, ':vg' AS g \gset
\set a debug(:a)
\set b debug(:b)
\set c debug(:c)
\set d debug(:d)
SELECT ':t' = '0.333333333333333' AS t_ok, ':g' = '1e+20' AS g_ok \gset
\set e debug(:t_ok and :g_ok)
