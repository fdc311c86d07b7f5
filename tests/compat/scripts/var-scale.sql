-- compat: -s 7 -t 1
\set a debug(:scale)
