\set a debug(:scale)
\set b debug(:client_id)
\set c debug(:random_seed is not null and :default_seed is not null)
