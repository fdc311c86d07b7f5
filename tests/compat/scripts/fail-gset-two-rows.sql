SELECT generate_series(1, 2) AS a \gset
