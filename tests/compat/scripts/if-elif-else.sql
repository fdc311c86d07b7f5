\set x 2
\if :x = 1
\set a debug(10)
\elif :x = 2
\set a debug(20)
\elif :x = 2
\set a debug(21)
\else
\set a debug(30)
\endif
