\set a false - 1
