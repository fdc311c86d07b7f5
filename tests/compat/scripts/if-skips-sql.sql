\if false
SELECT 1 / 0;
\endif
SELECT 1 AS one \gset
\if :one
\set a debug(:one)
\endif
