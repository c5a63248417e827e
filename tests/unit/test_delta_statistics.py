"""A delta's Parquet statistics never hide NaN rows from a filter (fuzz seed 44 query 885)."""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from htap.replica.deltas import write_delta
from htap.replica.warehouse import as_warehouse

from unit_support import make_table


def test_nan_rows_of_a_delta_match_the_filters_spark_keeps_them_by(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("d", pa.float64()), ("f", pa.float32()), ("n", pa.int32())])
    table = make_table(schema)
    nan = math.nan
    data = pa.table({"id": [1, 2, 3, 4], "d": [1.5, nan, -3.5, nan], "f": [nan, 2.0, 1.0, nan], "n": [1, 2, 3, 4],
                     "_seq": pa.array([5, 5, 5, 5], pa.int64()), "_op": pa.array([0, 0, 0, 0], pa.int8())})
    delta = write_delta(as_warehouse(tmp_path), table, data)
    path = tmp_path / delta.path
    footer = pq.ParquetFile(path).metadata.row_group(0)
    stats = {footer.column(i).path_in_schema: footer.column(i).is_stats_set for i in range(footer.num_columns)}
    assert stats["n"] and stats["id"] and not stats["d"] and not stats["f"]
    con = duckdb.connect()
    for where, rows in (("d > 100", 2), ("d = 'NaN'::DOUBLE", 2), ("isnan(d)", 2), ("f > 3", 2), ("n > 3", 1)):
        assert con.sql(f"SELECT count(*) FROM read_parquet('{path}') WHERE {where}").fetchall()[0][0] == rows, where
