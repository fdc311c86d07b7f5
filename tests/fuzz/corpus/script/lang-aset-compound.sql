SELECT 1 AS a \; SELECT 2 AS b \; SELECT 3 AS c WHERE false \aset
\set d debug(:a + :b)
