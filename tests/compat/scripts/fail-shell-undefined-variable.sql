\shell echo ::literal :missing
