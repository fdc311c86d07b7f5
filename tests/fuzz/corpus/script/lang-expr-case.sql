\set a debug(case when 1 < 2 then 1 else 2.5 end)
\set b debug(CASE WHEN false THEN 1 END)
\set c debug(case when 0 then 5 when 2 then 7 end)
\set d debug(case when null then 1 when 0.0 then 2 else 3 end)
