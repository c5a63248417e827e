"""A differential SQL fuzzer for spark-htap: random schemas, rows and queries; each query runs on
the replica route, the source route and plain Spark over a Parquet copy of the same rows, and
any difference is shrunk to a small reproduction. `python -m fuzz --help`; see fuzz/run.py."""
