\set a .5E310
