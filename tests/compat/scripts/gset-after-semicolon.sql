SELECT 3 AS a;
\gset
\set b debug(:a)
