\set a 1 / 0
