\elif true
\set a 1
