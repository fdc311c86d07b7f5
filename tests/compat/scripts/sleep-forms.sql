\set t 2
\sleep 1 ms
\sleep 10us
\sleep :t ms
\sleep 0
\sleep -1
\SLEEP 1 MS
\set a debug(1)
