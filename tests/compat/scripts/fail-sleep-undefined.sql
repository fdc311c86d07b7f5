\sleep :nowhere ms
