\set a hash()
