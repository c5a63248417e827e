"""CDC connectors: initial copy and change streams from the sources."""
