\set den 0
\set a debug(case when :den = 0 then 0 else 10 / :den end)
\set b debug(case when :den = 0 or 10 / :den > 1 then 0 else 1 end)
\set c debug(case when :den <> 0 and 10 / :den > 1 then 1 else 2 end)
\set d debug(true or 1 / 0 = 1)
\set e debug(case when true then 5 when 1 / 0 = 1 then 6 end)
