"""Reading a table from its source with the same pushed subplan (failover / fallback).

The subplan is rendered by sqlglot in the source's dialect — the same filters, columns and
partial aggregates the replica reader would run — and the result streams back as Arrow. Which
database answers, and how, is the source's business (htap.connectors.registry.open_queryable).
"""

from __future__ import annotations

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


def check_access(source: SourceConfig, user: str, table: TableInfo, columns: list[str]) -> str | None:
    """None if the source user may read those columns, else the reason (the replica never widens access)."""
    return open_queryable(source).check_select(user, table, columns)
