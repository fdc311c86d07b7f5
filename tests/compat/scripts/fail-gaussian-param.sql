\set a random_gaussian(1, 100, 1.5)
