SELECT 1 AS a WHERE false \gset
