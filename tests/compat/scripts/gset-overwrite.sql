\set v 1.5
SELECT 'abc' AS v \gset
SELECT length(':v') AS l \gset
\set a debug(:l)
SELECT 42 AS v \gset
\set b debug(:v + 1)
