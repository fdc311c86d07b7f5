\set a 1
\aset
