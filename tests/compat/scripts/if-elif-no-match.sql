\set hit 0
\if 1 < 0
\set hit 1
\elif 2 < 0
\set hit 2
\endif
\if 1 = 0
\set hit 3
\elif 1 <> 0
\set b debug(4)
\endif
\set a debug(:hit)
