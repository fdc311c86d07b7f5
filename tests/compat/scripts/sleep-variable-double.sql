\set zero 0
\set one 1.0
\set half 2.5
\sleep :one ms
\sleep :half us
\sleep 100 us
\sleep 0 s
\sleep :zero
\set a debug(:one)
