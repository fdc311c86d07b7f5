\set v 5
\set v 2.5
\set a debug(:v)
\set v true
\set b debug(:v)
\set v null
\set c debug(:v)
\set v :v is null
\set d debug(:v)
