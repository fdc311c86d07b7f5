\set one 1.0
\setshell got\
  echo \
    :one
\set a debug(:got)
