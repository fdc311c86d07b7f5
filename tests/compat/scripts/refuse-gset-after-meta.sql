\set a 1
\gset
