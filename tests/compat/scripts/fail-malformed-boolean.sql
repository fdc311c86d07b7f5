-- compat: -D flag=trueish
\set a :flag or true
