\set a foo(1)
