"""Merge-on-read of a replica table at one snapshot seq, then the pushed subplan, in DuckDB.

Versions of all deltas with `_seq <= snapshot` are collapsed per key (latest version wins; a
delete hides the row), and the pushed filters, projection and partial aggregation run on the
result — one vectorized DuckDB query, streamed out as Arrow record batches. Filters that touch
only key columns are applied before the collapse (every version of a key shares them), so point
and range lookups by key skip most of the work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from htap.errors import ReplicaError
from htap.replica.models import OP, OP_UPSERT, SEQ
from htap.rewrite import render
from htap.rewrite.subplan import PushedSubplan

BATCH_ROWS = 64 * 1024


def _ident(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")


def replica_sql(
    files: list[str], key: list[str], all_columns: list[str], seq: int, subplan: PushedSubplan, empty_source: str
) -> str:
    """The DuckDB query that reads `files` at `seq` and applies `subplan`."""
    needed = [c for c in all_columns if c in subplan.referenced_columns() or c in key or subplan.columns is None]
    scan_cols = ", ".join(_ident(c) for c in [*needed, SEQ, OP])
    if files:
        source = "read_parquet([" + ", ".join(exp.Literal.string(f).sql("duckdb") for f in files) + "])"
    else:
        source = empty_source
    key_filters = [f for f in subplan.filters if f.columns() <= set(key)]
    row_filters = [f for f in subplan.filters if f not in key_filters]
    version_where = [f"{_ident(SEQ)} <= {int(seq)}"] + [render.predicate(f).sql("duckdb") for f in key_filters]
    partition_by = ", ".join(_ident(k) for k in key)
    latest = (
        f"SELECT {scan_cols} FROM {source} WHERE {' AND '.join(version_where)} "
        f"QUALIFY row_number() OVER (PARTITION BY {partition_by} ORDER BY {_ident(SEQ)} DESC) = 1"
    )
    current = (
        exp.select("*")
        .from_(sqlglot.parse_one(latest, read="duckdb").subquery("latest"))
        .where(exp.column(OP, quoted=True).eq(OP_UPSERT))
    )
    rest = PushedSubplan(
        columns=subplan.columns, filters=tuple(row_filters), group_by=subplan.group_by, aggregates=subplan.aggregates
    )
    return render.select(rest, current.subquery("cur"), all_columns).sql("duckdb")


def delta_schema(table_schema: pa.Schema) -> pa.Schema:
    """Schema of a delta file: the table's columns plus the version bookkeeping."""
    return table_schema.append(pa.field(SEQ, pa.int64(), nullable=False)).append(
        pa.field(OP, pa.int8(), nullable=False)
    )


def read_replica(
    warehouse: Path,
    table_label: str,
    table_schema: pa.Schema,
    key: list[str],
    delta_paths: list[str],
    seq: int,
    subplan: PushedSubplan,
    output_schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """Stream the subplan's result over the table's current rows at `seq`, cast to `output_schema`."""
    files = [str(warehouse / p) for p in delta_paths]
    for f in files:
        if not Path(f).is_file():
            raise ReplicaError(f"delta file {f} of table {table_label} is missing; the replica is damaged")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    empty = pa.Table.from_batches([], schema=delta_schema(table_schema))
    con.register("__empty_deltas", empty)
    sql = replica_sql(files, key, table_schema.names, seq, subplan, "__empty_deltas")
    try:
        reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
        for batch in reader:
            yield _conform(batch, output_schema)
    except duckdb.IOException as e:
        raise ReplicaError(f"cannot read the deltas of table {table_label}: {e}") from e
    except duckdb.InvalidInputException as e:
        raise ReplicaError(f"a delta file of table {table_label} is corrupt: {e}") from e
    finally:
        con.close()


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Rename to the output names and cast to the exact types Spark expects."""
    if batch.num_columns != len(schema):
        raise ReplicaError(f"replica query returned {batch.num_columns} columns, Spark expects {len(schema)}")
    arrays = [col.cast(field.type) if col.type != field.type else col for col, field in zip(batch.columns, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
