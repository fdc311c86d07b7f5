-- compat: -c 3 -t 1
\set a debug(:client_id)
