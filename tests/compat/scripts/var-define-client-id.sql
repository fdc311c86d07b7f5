-- compat: -D client_id=7
\set a debug(:client_id)
