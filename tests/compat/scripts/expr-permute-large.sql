\set n 9223372036854775000
\set a debug(permute(:n - 1, :n, 99))
\set b debug(permute(:n - 2, :n, 99))
\set c debug(permute(0, :n, -99))
\set d debug(permute(4611686018427387904, :n, 0))
