\; SELECT 5 AS never WHERE false \; \aset
\set a debug(:never)
