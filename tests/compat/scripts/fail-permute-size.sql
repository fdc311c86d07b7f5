\set a permute(1, 0, 1)
