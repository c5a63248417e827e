"""The unified change model every source produces, and the interface a source implements.

A source (Postgres, MySQL/MariaDB, Debezium) turns its log into a stream of events:
`Begin` / `RowChange`... / `Commit` per transaction, in commit order, each transaction stamped
with its commit sequence (`seq`, an int64 in the source's own total commit order); `Truncate`
inside a transaction; `Progress` between transactions when the source can vouch that every
commit up to a seq has been delivered (heartbeats keep safe seqs moving while a source is idle).

Row values are in source column order. A value the source did not send (Postgres unchanged
TOAST, Debezium's unavailable-value placeholder) is `UNSET`: a partial update, filled from the
row's older version when read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from htap.connectors.tables import Column, SourceTable


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self):
        return "UNSET"


UNSET = _Unset()  # a value the source did not send because it did not change



def python_values(values: list, type: pa.DataType) -> pa.Array:
    """Decode one buffered column whose values are Python objects Arrow converts directly."""
    return pa.array(values, type)


@dataclass(frozen=True)
class Begin:
    seq: int
    commit_time: float  # Unix seconds


@dataclass(frozen=True)
class RowChange:
    schema: str
    table: str
    op: str  # "upsert" or "delete"
    values: list  # all columns, source order; for a delete, at least the key columns
    old: list | None = None  # the previous row/key, when the source sends it (key changes)


@dataclass(frozen=True)
class Truncate:
    tables: tuple[tuple[str, str], ...]  # (schema, table)


@dataclass(frozen=True)
class Commit:
    seq: int
    commit_time: float


@dataclass(frozen=True)
class Progress:
    seq: int  # every commit with seq <= this has been delivered


@dataclass(frozen=True)
class Relation:
    """The columns a source's rows for a table now carry (sent before rows when it changes)."""

    schema: str
    table: str
    columns: tuple[str, ...]


Event = Begin | RowChange | Truncate | Commit | Progress | Relation


class ChangeStream(ABC):
    """An open change stream; close it to release the source connection."""

    @abstractmethod
    def poll(self, timeout: float) -> Event | None:
        """The next event, or None when none arrived within `timeout` seconds."""

    @abstractmethod
    def confirm(self, seq: int) -> None:
        """Everything up to `seq` is durable in the replica: the source may forget it."""

    def request_progress(self) -> None:
        """Ask the source for a `Progress` event soon (used while idle)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> "ChangeStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ChangeSource(ABC):
    """One source database as the replica sees it."""

    def decode_column(self, values: list, type: pa.DataType) -> pa.Array:
        """One buffered column of this source's row values (as its stream delivers them) as an
        Arrow array of the replica's `type`, vectorized. Default: Python objects (MySQL, Debezium)."""
        return python_values(values, type)

    @abstractmethod
    def check(self) -> None:
        """Fail with the fix when the source cannot feed a replica (connectivity, log settings)."""

    @abstractmethod
    def describe_table(self, schema: str, table: str) -> tuple[list[Column], list[str]]:
        """Columns in source order and the primary key; TableError when it cannot be replicated."""

    @abstractmethod
    def arrow_type(self, source_type: str) -> pa.DataType:
        """The replica's Arrow type for a source column type."""

    @abstractmethod
    def prepare(self) -> None:
        """Create what streaming needs (publication, slot); idempotent."""

    @abstractmethod
    def initial_copy(self, table: SourceTable, work_dir: Path) -> tuple[int, Iterator[pa.Table]]:
        """A consistent copy: (copy seq, chunks of rows typed as the replica's Arrow schema).

        Every commit with seq <= copy seq is in the copy and none after it; the stream delivers
        the rest.
        """

    @abstractmethod
    def stream(self, from_seq: int, tables: list[SourceTable]) -> ChangeStream:
        """Stream commits with seq > from_seq for (at least) `tables`."""

    def existing_rows_have_value(self, schema: str, table: str, column: str) -> bool:
        """Whether rows that existed before `column` was added hold a value for it without any
        change having been logged for them (a stored or volatile default). Conservative: yes."""
        return True
