-- compat: -t 20
\set r random(1, 10)
\set a debug(:r >= 1 and :r <= 10)
\set e random_exponential(1, 100, 3.0)
\set b debug(:e >= 1 and :e <= 100)
