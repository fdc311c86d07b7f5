-- compat: -D scale=9 -D random_seed=3 -D default_seed=5432
\set a debug(:scale)
\set b debug(:random_seed)
\set c debug(:default_seed)
\set d debug(hash(10) = hash(10, 5432))
