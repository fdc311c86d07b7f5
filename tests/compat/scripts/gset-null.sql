SELECT NULL::int AS n \gset
SELECT length(':n') AS l \gset
\set a debug(:l)
