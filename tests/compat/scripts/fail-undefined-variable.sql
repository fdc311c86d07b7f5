\set a :nope + 1
