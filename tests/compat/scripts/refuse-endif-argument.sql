\if 1
\endif 2
