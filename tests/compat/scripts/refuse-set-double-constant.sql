\set a 2.5E308 * 1
