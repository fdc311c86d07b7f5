\shell true
\set a debug(1)
