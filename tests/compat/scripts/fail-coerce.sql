\set a not 1
