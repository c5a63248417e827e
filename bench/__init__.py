"""Benchmarks of spark-htap against what users would use instead (issue 7); see the docs' "Benchmarks" pages."""
