"""What every screen shares and no screen owns: the app as screens see it, workers' messages, themes, keys."""
