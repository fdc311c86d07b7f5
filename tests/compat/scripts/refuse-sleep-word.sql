\sleep foo
