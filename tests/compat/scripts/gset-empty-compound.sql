\; \; SELECT 1 AS v \; \; SELECT 2 AS v \; \; \gset
\set a debug(:v)
