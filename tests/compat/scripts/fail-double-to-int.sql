\set a int(-1e30)
