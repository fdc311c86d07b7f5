\if true
\set a debug(1)
\endif
\if 0
\set b debug(2)
\endif
