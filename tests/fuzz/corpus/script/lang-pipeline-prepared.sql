-- compat: -M prepared
\set x 3
\startpipeline
SELECT :x;
SELECT :x + 1;
\endpipeline
\set a debug(:x)
