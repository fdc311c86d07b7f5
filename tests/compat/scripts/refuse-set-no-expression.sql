\set a
