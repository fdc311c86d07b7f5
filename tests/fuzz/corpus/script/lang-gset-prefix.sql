SELECT 5 AS v \gset p_
\set a debug(:p_v)
