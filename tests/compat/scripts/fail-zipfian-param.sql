\set a random_zipfian(1, 10, 0.5)
