-- compat: --random-seed=1234 -t 1
\set a debug(:random_seed)
