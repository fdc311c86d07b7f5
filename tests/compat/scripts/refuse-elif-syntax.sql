\if false
\elif 2 *
\endif
