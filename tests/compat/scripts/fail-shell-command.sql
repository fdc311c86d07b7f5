\shell compatnosuchcommand
