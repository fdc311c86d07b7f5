CREATE OR REPLACE FUNCTION compat_atomic() RETURNS int LANGUAGE sql
BEGIN ATOMIC
  SELECT 1;
  SELECT 2;
END;
SELECT compat_atomic() AS r \gset
\set a debug(:r)
