\set a random(true, 3)
