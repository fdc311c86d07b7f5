\set a ;
