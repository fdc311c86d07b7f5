SELECT 1 AS a, 'x' AS b \gset
\set c debug(:a)
SELECT ':b' = 'x' AS ok \gset
\set d debug(:ok)
