\set a sqrt(false)
