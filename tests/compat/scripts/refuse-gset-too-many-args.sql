SELECT 1 AS a \gset p_ q_
