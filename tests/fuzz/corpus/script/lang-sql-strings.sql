SELECT length(E'a\'b;') AS l, length('it''s;') AS m, length("x;") AS n FROM (SELECT 1 AS "x;") t \gset
\set a debug(:l + :m)
