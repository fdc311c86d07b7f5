SELECT \gset
\set a debug(1)
