\setshell x echo 42
\set a debug(:x + 1)
\setshell y echo :x
\set b debug(:y)
\setshell z echo ::x
