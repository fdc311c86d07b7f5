\set . 1
