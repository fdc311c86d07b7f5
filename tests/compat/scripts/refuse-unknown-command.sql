SELECT 1;
\gexec
