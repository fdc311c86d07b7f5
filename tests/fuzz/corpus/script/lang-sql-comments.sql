/* a licence header; with a semicolon */
\set a debug(1)
SELECT /* a /* nested ; */ comment */ 2 AS b \gset
-- a line comment; with a semicolon
\set c debug(:b)
