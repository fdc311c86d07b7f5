SELECT length($a$ ; $b$ ; $a$) AS l \gset
\set a debug(:l)
SELECT $$x;y$$ AS s;
