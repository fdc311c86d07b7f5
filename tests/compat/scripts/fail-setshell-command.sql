\setshell v compatnosuchcommand
