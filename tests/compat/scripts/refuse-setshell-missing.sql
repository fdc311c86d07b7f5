\setshell onlyname
