SELECT 1 AS dup, 2 AS other, 3 AS dup \gset
\set a debug(:dup)
\set b debug(:other)
