"""spark-htap: CDC-fed, snapshot-consistent columnar replicas of OLTP tables for Spark SQL."""

__version__ = "0.1.0"
