-- compat: -D t=abc
\sleep :t ms
