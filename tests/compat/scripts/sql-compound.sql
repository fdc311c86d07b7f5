SELECT 1 AS a \; SELECT 2 AS b \gset
\set c debug(:b)
