"""Benchmarks of spark-htap against what users would use instead (issue 7). See bench/README.md."""
