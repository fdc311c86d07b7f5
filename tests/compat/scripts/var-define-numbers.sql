-- compat: -Di=+3 -Dneg=-10.1 -Dd=1.0 -Dexp=2e3 -Dbig=9223372036854775807 -Dlead=007
\set a debug(:i)
\set b debug(:neg)
\set c debug(:d)
\set e debug(:exp)
\set f debug(:big)
\set g debug(:lead)
\set h debug(-75.0 / :neg)
