\SET a debug(Random(3, 3) + ABS(-1))
\Set b debug(NULL IS NULL)
