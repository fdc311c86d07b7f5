\set café 5
\set b debug(:café + 1)
\set _x1 2
\set c debug(:_x1)
