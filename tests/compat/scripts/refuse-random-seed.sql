-- compat: --random-seed=seven
\set a 1
