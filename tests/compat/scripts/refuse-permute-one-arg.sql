\set a permute(5)
