\set keep 7
SELECT 1 AS keep WHERE false \; SELECT 2 AS other \aset
\set a debug(:keep)
\set b debug(:other)
