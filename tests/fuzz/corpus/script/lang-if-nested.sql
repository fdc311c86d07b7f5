\if false
\if 1 / 0 = 1
\set a debug(1)
\else
\set a debug(2)
\endif
\else
\if null
\set b debug(3)
\elif 2.5
\set b debug(4)
\endif
\endif
