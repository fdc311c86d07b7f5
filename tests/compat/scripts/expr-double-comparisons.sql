\set a debug(case when (2 > 1) and (2 >= 2) and (1 < 2) and (1 <= 1) and (1 != 2) and (1 = 1) and (1 <> 2) then 7 else 0 end)
\set b debug(CASE \
    WHEN (2.5 > 1.5) AND (2.5 >= 2.5) AND (-1.5 < 0.0) AND \
         (0.5 <= 0.5) AND (0.5 != 0.25) AND (1.0 = 1) AND (2 <> 2.5) \
      THEN 8 \
      ELSE 0 \
  END)
\set c debug(case when false then 0 when 2-2 <> 0 then 1 else 9 end)
\set d debug(case when false THEN -1 when 2 = 2 then 1 + 2 + 0.5 end)
\set e debug(CASE WHEN NOT FALSE THEN 3 * 12.5 END)
