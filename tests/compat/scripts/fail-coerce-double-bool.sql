\set a not 0.5
