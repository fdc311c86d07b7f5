SELECT 1 AS "not a name" \gset
