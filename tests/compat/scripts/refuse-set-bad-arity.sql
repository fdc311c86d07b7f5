\set a random(1)
