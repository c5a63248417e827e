"""The Spark-facing side: the Java catalog shim (source under java/) and its Python helpers."""
