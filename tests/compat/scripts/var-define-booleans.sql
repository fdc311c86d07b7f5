-- compat: -Dt=t -Df=of -Dy=Y -Dn=n -Don=ON -Doff=off -Dtr=tru -Dfa=FALSE
\set a debug(:t)
\set b debug(:f)
\set c debug(:y)
\set d debug(:n)
\set e debug(:on)
\set f debug(:off)
\set g debug(:tr and not :fa)
