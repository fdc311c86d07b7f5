\set a random_exponential(1, 100, 0.0)
