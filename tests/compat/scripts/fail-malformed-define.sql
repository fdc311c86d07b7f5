-- compat: -D x=foo
\set a :x + 1
