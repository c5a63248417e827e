"""The Python data source Spark reads HTAP tables through, and its Arrow readers."""
