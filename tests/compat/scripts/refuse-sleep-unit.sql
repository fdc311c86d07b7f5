\sleep 1 h
