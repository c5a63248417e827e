"""The application layer: the `htap` command line, the end-to-end demo and the status report."""
