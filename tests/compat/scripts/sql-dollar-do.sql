DO $$ BEGIN PERFORM 1; PERFORM 2; END $$;
\set a debug(1)
