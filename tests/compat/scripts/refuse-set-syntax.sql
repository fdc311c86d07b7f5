\set a 1 +
