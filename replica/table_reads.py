"""A replica table's rows at a seq as one DuckDB relation, for the service's own reads (building
and keeping derived views: htap.ingest.views). Spark's reads go through htap.pushdown, which
pushes filters, aggregates and joins into partition reads and uses deletion vectors; this is the
plain per-key merge over every partition's deltas (always exact), under a lease that keeps
compaction from deleting the files while they are read."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import duckdb
import pyarrow as pa

from htap import engine
from htap.replica.merge import current_rows_sql, evolved, ident, parquet_source, versioned_source
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo
from htap.replica.read_plans import plan_reads
from htap.replica.warehouse import Warehouse

LEASE_S = 3600.0  # a lease outlives any read it covers; released when the read ends


@contextmanager
def rows_at(warehouse: Warehouse, store: MetadataStore, table: TableInfo, seq: int, columns: list[str],
            holder: str, keys_where: str | None = None) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    """A DuckDB cursor and the SQL of `table`'s `columns` at `seq` (one row per live key), for
    queries over it (`SELECT ... FROM ({sql})`) inside the `with`.

    `keys_where` (SQL over one version's columns as `r.<column>`; it may name relations
    registered on the cursor before the query runs): only the keys some version of which
    satisfies it, a superset of the keys whose row at `seq` does. The other keys' versions are
    never merged: the rows of a few keys of a large table (those joined to a changed dimension
    row, those of a few groups) cost a scan of the columns the condition reads, not a merge of
    every key (4.4x less at 6M rows)."""
    pin, deltas = store.pin(table.id, seq, LEASE_S, holder)
    try:
        plans = plan_reads(table, deltas, seq, store.truncated_at(table.id, seq), layout=store.layout_at(table.id, seq))
        names = table.arrow_schema.names
        files = {path: checksum for plan in plans for path, checksum in plan.files} or \
            {path: None for plan in plans for path in plan.delta_paths}
        with warehouse.local(files) as root:
            con = engine.cursor()
            parts = []
            for plan in plans:
                if not plan.delta_paths:
                    continue
                local = [str(root / p) for p in plan.delta_paths]
                source = (versioned_source(local, list(plan.delta_versions), dict(plan.added_versions), names)
                          if evolved(list(plan.delta_versions), dict(plan.added_versions)) else parquet_source(local))
                only = [] if keys_where is None else [
                    f"({', '.join(ident(k) for k in table.key)}) IN"
                    f" (SELECT {', '.join(f'r.{ident(k)}' for k in table.key)} FROM {source} AS r WHERE {keys_where})"]
                parts.append(current_rows_sql(source, list(table.key), names, columns, seq, floor=plan.floor,
                                              partial=plan.partial, key_conditions=only))
            if not parts:  # no delta yet: no row
                con.register("__no_rows", table.arrow_schema.empty_table())
                parts = [f"SELECT {', '.join(ident(c) for c in columns)} FROM __no_rows"]
            try:
                yield con, " UNION ALL ".join(f"({p})" for p in parts)
            finally:
                con.close()
    finally:
        store.release_pin(pin.id)


def read_at(warehouse: Warehouse, store: MetadataStore, table: TableInfo, seq: int, columns: list[str],
            holder: str) -> pa.Table:
    """`table`'s `columns` at `seq`, all of them in memory (a view's groups: few rows)."""
    with rows_at(warehouse, store, table, seq, columns, holder) as (con, rows):
        return con.sql(f"SELECT * FROM ({rows})").to_arrow_table()
