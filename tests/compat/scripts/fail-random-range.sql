\set a random(5, 1)
