SELECT 1 AS a;
/* licence */ \gset
\set x debug(:a)
