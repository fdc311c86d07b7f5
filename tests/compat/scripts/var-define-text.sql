-- compat: -D x=2.5 -D b=yes -D n=null -D i=41 -D s=7 -t 1
\set a debug(:x * 2)
\set b debug(:b and true)
\set c debug(:n)
\set d debug(:i + 1)
SELECT ':s' AS s \gset
\set e debug(:s)
