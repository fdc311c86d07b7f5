SELECT 1::int AS a, '12:30'::time::text AS t, 'x::y' AS u \gset
\set b debug(:a)
