\if 1
\else 2
\endif
