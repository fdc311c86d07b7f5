\set a least()
