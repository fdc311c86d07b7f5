-- compat: -t 20
\set g random_gaussian(-5, 5, 2.5)
\set a debug(:g >= -5 and :g <= 5)
\set z random_zipfian(1, 1000, 1.07)
\set b debug(:z >= 1 and :z <= 1000)
\set u random(7, 7)
\set c debug(:u)
