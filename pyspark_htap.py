"""Spark registers this module's DefaultSource as the `htap` data source automatically.

Spark looks up every top-level module named `pyspark_*` (static registration), so users need
no `spark.dataSource.register` call: the catalog config alone is enough.
"""

from htap.pushdown.datasource import HtapDataSource as DefaultSource

__all__ = ["DefaultSource"]
