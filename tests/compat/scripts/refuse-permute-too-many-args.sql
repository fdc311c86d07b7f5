\set a permute(1, 10, 3, 4)
