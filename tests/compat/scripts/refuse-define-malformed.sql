-- compat: -D novalue
\set a 1
