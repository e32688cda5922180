"""Code generators: tile IR + Config -> device source."""
