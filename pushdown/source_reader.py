"""Reading a table from its source with the same pushed subplan (failover / fallback).

The subplan is rendered by sqlglot in the source's dialect — the same filters, columns and
partial aggregates the replica reader would run — and the result streams back as Arrow.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import sqlglot
from sqlglot import exp

from htap.conf import SourceConfig
from htap.errors import SourceError
from htap.replica.models import TableInfo
from htap.rewrite import render
from htap.rewrite.subplan import PushedSubplan

DIALECTS = {"postgres": "postgres", "mysql": "mysql"}


def source_sql(source: SourceConfig, table: TableInfo, subplan: PushedSubplan) -> str:
    dialect = DIALECTS.get(source.kind)
    if dialect is None:
        raise SourceError(f"reading {table.qualified_name} from a {source.kind} source is not supported")
    relation = exp.Table(this=exp.to_identifier(table.name, quoted=True), db=exp.to_identifier(table.schema, quoted=True))
    if source.kind == "postgres":
        relation = replica_values(table, relation)
    return render.select(subplan, relation, [c.name for c in table.columns]).sql(dialect)


def replica_values(table: TableInfo, relation: exp.Expression) -> exp.Expression:
    """The table's rows as the replica holds them (each column's fate: NaN numerics as NULL,
    infinite dates as the ends of Spark's range, overridden columns as their replica type), so
    that pushed filters and aggregates on the source give what they give on the replica."""
    from htap.connectors.pgtypes import replica_value_sql

    types = table.arrow_schema
    columns = []
    for c in table.columns:
        expr = replica_value_sql(c.name, c.source_type, types.field(c.name).type, c.override)
        columns.append(sqlglot.parse_one(expr, read="postgres").as_(c.name, quoted=True))
    return exp.select(*columns).from_(relation).subquery(exp.to_identifier(table.name, quoted=True))


def read_source(
    source: SourceConfig, table: TableInfo, subplan: PushedSubplan, output: pa.Schema, snapshot: str | None = None
) -> Iterator[pa.RecordBatch]:
    query = source_sql(source, table, subplan)
    if source.kind == "postgres":
        from htap.connectors.postgres import read_query  # the source's driver, loaded only when used

        return read_query(source.dsn, query, output, snapshot)
    raise SourceError(f"reading {table.qualified_name} from a {source.kind} source is not built yet")


def check_access(source: SourceConfig, user: str, table: TableInfo, columns: list[str]) -> str | None:
    """None if the source user may read those columns, else the reason (the replica never widens access)."""
    if source.kind == "postgres":
        from htap.connectors.postgres import check_select  # the source's driver, loaded only when used

        return check_select(source.dsn, user, table.schema, table.name, columns)
    raise SourceError(f"access checks for {source.kind} sources are not built yet; remove the catalog's `user` option")
