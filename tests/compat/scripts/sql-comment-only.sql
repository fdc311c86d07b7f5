/* x */
-- nothing else
