SELECT 1 AS a
\set b debug(2)
SELECT 3 AS c
