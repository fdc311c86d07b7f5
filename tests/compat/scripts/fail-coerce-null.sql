\if true
\endif
\set a int(null) + int(true)
