"""How a source table looks to the connectors: its columns, its key and its replica types.

The replica keeps much more about each HTAP table (state, safe seqs, partitions; see
`htap.replica.models.TableInfo`), but a connector needs only this much to copy and stream a
table, so the connectors depend on this description and never on the replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    source_type: str  # the source's spelling, e.g. "numeric(12,2)"
    nullable: bool
    added_version: int = 1  # schema version that added it: older deltas hold no value for it


class SourceTable(Protocol):
    """A table a connector copies and streams (the replica's TableInfo is one)."""

    @property
    def id(self) -> int: ...  # unique per replica (names temporary slots and files)

    @property
    def schema(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def columns(self) -> tuple[Column, ...]: ...  # source order

    @property
    def key(self) -> tuple[str, ...]: ...  # primary key columns, in key order

    @property
    def copy_seq(self) -> int | None: ...  # the seq the table's initial copy reflects, once copied

    @property
    def arrow_schema(self) -> pa.Schema: ...  # the replica's Arrow type per column

    @property
    def qualified_name(self) -> str: ...
