-- compat: -D lo=-9223372036854775808
\set a :lo / -1
