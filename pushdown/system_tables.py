"""System tables: `<catalog>.htap.tables` and `<catalog>.htap.freshness`, readable with SQL.

Built from the metadata store at planning time; the pushed plan (filters, columns, aggregates)
runs on them in DuckDB like on any replica table, so nothing pushed is dropped.
"""

from __future__ import annotations

import time

import pyarrow as pa
from sqlglot import exp

from htap import engine
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo
from htap.replica.read_plans import queryable_window
from htap.rewrite import render
from htap.rewrite.dialects import REPLICA
from htap.rewrite.pushed import PushedPlan

SYSTEM_SCHEMA = "htap"

TABLES = pa.schema([
    ("source", pa.string()), ("schema_name", pa.string()), ("table_name", pa.string()), ("state", pa.string()),
    ("deltas", pa.int64()), ("row_versions", pa.int64()), ("bytes", pa.int64()),
    ("min_safe_seq", pa.int64()), ("max_safe_seq", pa.int64()), ("visible_seq", pa.int64()), ("delay_s", pa.float64()),
    ("failover", pa.bool_()), ("max_staleness_s", pa.float64()), ("schema_version", pa.int64()),
    ("last_route", pa.string()), ("last_route_reason", pa.string()), ("last_route_at", pa.timestamp("us", tz="UTC")),
    ("error", pa.string()),
])
FRESHNESS = pa.schema([
    ("source", pa.string()), ("schema_name", pa.string()), ("table_name", pa.string()),
    ("max_safe_seq", pa.int64()), ("max_safe_time", pa.timestamp("us", tz="UTC")), ("delay_s", pa.float64()),
    ("source_position", pa.int64()), ("visible_seq", pa.int64()),
])
SCHEMAS = {"tables": TABLES, "freshness": FRESHNESS}


def is_system_table(schema: str, table: str) -> bool:
    return schema == SYSTEM_SCHEMA and table in SCHEMAS


def visible_seq(t: TableInfo, tails: dict[str, dict]) -> int | None:
    """The newest seq `t` is readable at with readTail: its max safe seq, or past it as far as
    the running service's in-memory tail of the table is whole (`tails`: htap.replica.tail.statuses);
    None when no running service serves its tail."""
    limit = tails.get(t.source, {}).get("tables", {}).get(str(t.id))
    return None if limit is None else max(limit, t.max_safe_seq or 0)


def rows(store: MetadataStore, window_s: float, which: str, tails: dict[str, dict]) -> pa.Table:
    """The system table `which` now; `tails`: what the running services' tails hold, per source."""
    now = time.time()
    out = []
    for t in store.list_tables(views=True):  # a view is a replica table too (schema `views`)
        delay = None if t.max_safe_time is None else max(0.0, now - t.max_safe_time)
        if which == "freshness":
            out.append({
                "source": t.source, "schema_name": t.schema, "table_name": t.name, "max_safe_seq": t.max_safe_seq,
                "max_safe_time": None if t.max_safe_time is None else int(t.max_safe_time * 1e6),
                "delay_s": delay, "source_position": store.source_position(t.source),
                "visible_seq": visible_seq(t, tails),
            })
            continue
        n, versions, size = store.delta_stats(t.id)
        window = queryable_window(store, t, window_s)
        scans = store.recent_scans(t.id, 1)
        last = scans[0] if scans else None
        out.append({
            "source": t.source, "schema_name": t.schema, "table_name": t.name, "state": t.state,
            "deltas": n, "row_versions": versions, "bytes": size,
            "min_safe_seq": window.min_seq if window else None, "max_safe_seq": t.max_safe_seq,
            "visible_seq": visible_seq(t, tails), "delay_s": delay,
            "failover": t.failover, "max_staleness_s": t.max_staleness_s, "schema_version": t.schema_version,
            "last_route": last.route if last else None, "last_route_reason": last.reason if last else None,
            "last_route_at": int(last.at * 1e6) if last else None, "error": t.error,
        })
    return pa.Table.from_pylist(out, schema=SCHEMAS[which])


def query(data: pa.Table, plan: PushedPlan, output: pa.Schema) -> list[pa.RecordBatch]:
    """Apply the pushed plan (of one scan: the system table's) to a system table's rows."""
    con = engine.cursor()
    try:
        con.register("system_rows", data)
        sql = render.render_plan(plan, [render.scan_select(plan.scans[0], exp.to_table("system_rows"))]).sql(REPLICA)
        result = con.sql(sql).to_arrow_table()
    finally:
        con.close()
    if len(output) == 0:
        return result.select([]).to_batches()
    arrays = [col.combine_chunks().cast(f.type) for col, f in zip(result.columns, output)]
    return pa.Table.from_arrays(arrays, schema=output).to_batches() if result.num_rows else []
