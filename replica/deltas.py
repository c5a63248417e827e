"""Writing deltas: a batch of changes -> one Parquet file sorted by (key ASC, seq DESC).

A delta file is written under a temporary name, fsynced, renamed, and its folder fsynced before
the metadata transaction that references it commits: a crash leaves at worst an unreferenced
file, never a reference to a file that is not fully on disk.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from htap.replica.metadata import NewDelta
from htap.replica.models import OP, SEQ, TableInfo

ORD = "_ord"  # arrival order inside a batch; breaks ties between versions of one key at one seq
ROW_GROUP_ROWS = 128 * 1024


def table_dir(table: TableInfo) -> str:
    return f"{table.source}/{table.schema}.{table.name}-{table.id}"


def sort_versions(data: pa.Table, key: list[str]) -> pa.Table:
    """Keep the last version per (key, seq) in arrival order, sorted by key ASC, seq DESC."""
    con = duckdb.connect()
    try:
        con.register("batch", data)
        keys = ", ".join(f'"{k}"' for k in key)
        return con.sql(
            f'SELECT * EXCLUDE ("{ORD}") FROM batch '
            f'QUALIFY row_number() OVER (PARTITION BY {keys}, "{SEQ}" ORDER BY "{ORD}" DESC) = 1 '
            f'ORDER BY {keys}, "{SEQ}" DESC'
        ).to_arrow_table()
    finally:
        con.close()


def write_delta(warehouse: Path, table: TableInfo, data: pa.Table) -> NewDelta:
    """Write `data` (table columns, _seq, _op and optionally _ord) as one durable delta file."""
    if ORD in data.column_names:
        data = sort_versions(data, list(table.key))
    target = table.arrow_schema
    target = target.append(pa.field(SEQ, pa.int64(), nullable=False)).append(pa.field(OP, pa.int8(), nullable=False))
    data = data.select(target.names).cast(target)
    seqs = data.column(SEQ)
    rel = f"{table_dir(table)}/{uuid.uuid4().hex}.parquet"
    path = warehouse / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(data, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd", write_statistics=True)
    _fsync(tmp)
    os.replace(tmp, path)
    _fsync(path.parent)
    import pyarrow.compute as pc

    bounds = pc.min_max(seqs)
    return NewDelta(
        table_id=table.id,
        path=rel,
        min_seq=bounds["min"].as_py(),
        max_seq=bounds["max"].as_py(),
        rows=data.num_rows,
        bytes=path.stat().st_size,
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
