\set a 1 @ 2
