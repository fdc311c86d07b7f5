-- compat: -c 4 -t 1
\if :client_id % 2 = 0
\set a debug(0)
\else
\set a debug(1)
\endif
