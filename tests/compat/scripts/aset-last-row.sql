SELECT generate_series(1, 3) AS g \aset
\set a debug(:g)
