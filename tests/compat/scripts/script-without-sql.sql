\set a 1
\set b debug(:a + 1)
