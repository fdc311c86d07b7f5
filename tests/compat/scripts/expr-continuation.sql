\set a 1 + \
  2 * \
  3
\set b debug(:a)
