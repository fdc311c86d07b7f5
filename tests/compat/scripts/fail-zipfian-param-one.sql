\set a random_zipfian(1, 100, 1)
