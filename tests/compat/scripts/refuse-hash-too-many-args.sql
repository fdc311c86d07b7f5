\set a hash(1, 2, 3)
