"""Reading a table from its source with the same pushed subplan (failover / fallback).

The subplan is rendered by sqlglot in the source's dialect — the same filters, columns and
partial aggregates the replica reader would run — and the result streams back as Arrow. Which
database answers, and how, is the source's business (htap.connectors.registry.open_queryable).
"""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa

from htap.conf import SourceConfig
from htap.connectors.registry import open_queryable
from htap.replica.models import TableInfo
from htap.rewrite.subplan import PushedSubplan


def source_sql(source: SourceConfig, table: TableInfo, subplan: PushedSubplan) -> str:
    return open_queryable(source).render(table, subplan)


def read_source(
    source: SourceConfig, table: TableInfo, subplan: PushedSubplan, output: pa.Schema, snapshot: str | None = None
) -> Iterator[pa.RecordBatch]:
    return open_queryable(source).read(table, subplan, output, snapshot)


def read_joined_source(
    source: SourceConfig, tables: list[TableInfo], subplan: PushedSubplan, output: pa.Schema, snapshot: str | None = None
) -> Iterator[pa.RecordBatch]:
    """A joined scan's whole subplan as one query of the source (one statement: one snapshot)."""
    return open_queryable(source).read_joined(tables, subplan, output, snapshot)


def check_access(source: SourceConfig, user: str, table: TableInfo, columns: list[str]) -> str | None:
    """None if the source user may read those columns, else the reason (the replica never widens access)."""
    return open_queryable(source).check_select(user, table, columns)


def _bound(value, t: pa.DataType) -> dict:
    if pa.types.is_integer(t):
        return {"type": "long", "value": int(value)}
    if pa.types.is_date32(t):
        return {"type": "date", "value": value.isoformat()}
    return {"type": "string", "value": str(value)}


def source_ranges(source: SourceConfig, table: TableInfo, pushed: str | None, range_rows: int) -> list[str | None]:
    """The pushed subplan (JSON) once per key range of the source's table: [first, b1), [b1, b2),
    ..., [bk, last] on the first key column. Read in parallel, the ranges must share one source
    snapshot (the caller only splits when one is exported)."""
    points = open_queryable(source).split_points(table, range_rows)
    if not points:
        return [pushed]
    key0 = table.key[0]
    t = table.arrow_schema.field(key0).type
    raw = json.loads(pushed) if pushed else {}
    edges = [None, *points, None]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        bounds = []
        if lo is not None:
            bounds.append({"op": "ge", "col": key0, "value": _bound(lo, t)})
        if hi is not None:
            bounds.append({"op": "lt", "col": key0, "value": _bound(hi, t)})
        out.append(json.dumps({**raw, "filters": [*raw.get("filters", []), *bounds]}))
    return out
