SELECT (1 +
2) AS p \gset
\set a debug(:p)
