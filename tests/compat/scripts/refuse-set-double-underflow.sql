\set a 1e-320
