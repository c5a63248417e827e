"""The unified change model every source produces, and the interface a source implements.

A source (Postgres, MySQL/MariaDB, Debezium) turns its log into a stream of events:
`Begin` / `RowChange`... / `Commit` per transaction (a `RowBatch` is a run of row changes of one
table, column-wise), in commit order, each transaction stamped
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
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

if TYPE_CHECKING:
    from htap.connectors.queryable import QueryableSource

from htap.connectors.tables import OVERRIDE_TYPES, Column, SourceTable, override_type
from htap.errors import PoisonError, SourceError, TableError


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self):
        return "UNSET"


UNSET = _Unset()  # a value the source did not send because it did not change



def python_values(values: list, type: pa.DataType) -> pa.Array:
    """Decode one buffered column whose values are Python objects Arrow converts directly."""
    return pa.array(values, type)


# What decoding raises for a value its replica type cannot hold (never for a lost connection).
DECODE_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError, ArithmeticError, TableError)


def decode_checked(decode: Callable, values, type: pa.DataType, column: str) -> pa.Array:
    """`decode(values, type)`, vectorized; when it fails, a PoisonError naming the column and
    the first value that cannot be decoded (found by bisection: only on the failure path)."""
    try:
        return decode(values, type)
    except DECODE_ERRORS as e:
        raise find_poison(decode, values, type, column, e) from e


def find_poison(decode: Callable, values, type: pa.DataType, column: str, error: BaseException) -> PoisonError:
    """The first value of `values` that fails to decode on its own, as a PoisonError."""
    if isinstance(error, PoisonError):
        return error
    lo, hi = 0, len(values)
    while hi - lo > 1:  # invariant: the first failing value is in values[lo:hi]
        mid = (lo + hi) // 2
        try:
            decode(values[lo:mid], type)
            lo = mid
        except DECODE_ERRORS:
            hi = mid
    if hi - lo == 1:
        try:
            decode(values[lo:hi], type)
        except DECODE_ERRORS as e:
            value = values[lo]
            if isinstance(value, pa.Scalar):
                value = value.as_py()
            return PoisonError(column, value, f"{_first_line(e)} (replica type {type})", row=lo)
    return PoisonError(column, None, f"{_first_line(error)} (replica type {type})")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@dataclass(frozen=True)
class Retention:
    """What a source keeps for the replica so that nothing is lost while the replica is behind
    (`htap status`): a Postgres slot retains WAL; a binlog reader retains nothing itself."""

    what: str  # e.g. "slot htap_shop"
    retained_bytes: int | None = None  # log kept only for the replica (None: unknown / not applicable)
    active: bool | None = None  # a replica process is connected
    state: str | None = None  # the source's own word for it (Postgres wal_status: reserved, extended, lost...)
    confirmed: str | None = None  # the position the source was last told is durable, in its notation
    note: str | None = None  # anything the user should know
    lag_bytes: int | None = None  # log the source wrote after the replica's durable position
    lost: str | None = None  # why the source no longer holds log the replica needs (None: it does)


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
    # A new row (no older version of any key to complete it from): a source that cannot pair
    # the halves of a key change (Debezium's `d` + `c`) marks the `c`, so that an UNSET value in
    # it fails its table instead of being taken from an unrelated older version of the new key.
    inserted: bool = False


@dataclass(frozen=True)
class RowBatch:
    """Consecutive changes of one table in one transaction, all of one op, column-wise: one
    sequence per column in source order, of the values as the source's `decode_column` takes them
    (Postgres: Arrow string arrays of text). It holds no UNSET value and no old key (a key change
    always arrives as a `RowChange`); for a delete only the key columns matter. The same changes
    as `RowChange`s, in the same order, mean exactly the same: a batch only spares the per-row
    Python steps."""

    schema: str
    table: str
    op: str  # "upsert" or "delete"
    columns: list

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0


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


Event = Begin | RowChange | RowBatch | Truncate | Commit | Progress | Relation


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

    def list_tables(self, schema: str) -> list[str]:
        """The names of the tables of a schema (`htap tables add --schema`), sorted; SourceError
        when this kind of source cannot list them."""
        raise SourceError(
            f"source {self.config.name} ({self.config.kind}) cannot list a schema's tables: name each table"
            " (htap tables add <schema>.<table> ...)"
        )

    @abstractmethod
    def arrow_type(self, source_type: str) -> pa.DataType:
        """The replica's Arrow type for a source column type; TableError (saying why) when no
        replica type holds all its values."""

    def override_allowed(self, column: Column) -> bool:
        """Whether this source delivers `column` exactly as any override type (OVERRIDE_TYPES)
        on every path (copy, stream, source reads). Default: no overrides."""
        return False

    def check_override(self, column: Column) -> None:
        """Fail (TableError) when this source cannot deliver `column` as its override type."""
        override_type(column.override)
        if not self.override_allowed(column):
            raise TableError(
                f"column {column.name} ({column.source_type}): this source cannot give it another replica type "
                f"(--column-type); its own type maps to {self._own_type(column)}"
            )

    def _own_type(self, column: Column) -> str:
        try:
            return str(self.arrow_type(column.source_type))
        except TableError as e:
            return f"nothing ({e})"

    def replica_type(self, column: Column) -> pa.DataType:
        """The replica's Arrow type of a column: its override, else its source type's own.
        TableError names the column and the way out when neither applies."""
        if column.override:
            self.check_override(column)
            return override_type(column.override)
        try:
            return self.arrow_type(column.source_type)
        except TableError as e:
            way_out = (
                f"; choose its replica type with --column-type {column.name}=<{OVERRIDE_TYPES}>"
                if self.override_allowed(column) else "; exclude the table or change the column type in the source"
            )
            raise TableError(f"column {column.name}: {e}{way_out}") from e

    def replica_schema(self, columns: list[Column] | tuple[Column, ...]) -> pa.Schema:
        """The replica's Arrow schema of a table's columns (TableError naming the first column
        that has no replica type)."""
        return pa.schema([pa.field(c.name, self.replica_type(c)) for c in columns])

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

    def queryable(self) -> "QueryableSource":
        """The source's read side (failover reads, access checks, snapshots for verification);
        SourceError saying what to configure when this source cannot be queried."""
        raise SourceError(f"a {type(self).__name__} cannot be read directly (no failover reads or verification)")

    # --- operations ---------------------------------------------------------------------------

    def retention(self, position: int | None = None) -> Retention | None:
        """What the source keeps for the replica now, whose durable position is `position`
        (None: nothing to report)."""
        return None

    def committed_seq(self, tables: list[tuple[str, str]]) -> int:
        """The seq of the source's newest commit now: a replica whose max safe seq reaches it
        holds every change committed before this call (`spark.htap.readAfter = now`) to
        `tables` (schema, name), the query's (a source whose position is per table asks only theirs)."""
        raise SourceError(
            f"source {self.config.name} ({self.config.kind}): readAfter = now is not supported for this kind of"
            f" source yet; give the seq to read after instead (readAfter = <seq>)"
        )

    def reset_log(self) -> str:
        """The log the replica streamed from is lost (`Retention.lost`): forget it, so that
        `prepare` starts a new one from which the re-copied tables are followed. Returns what was
        done, in one line."""
        raise SourceError(
            f"source {getattr(getattr(self, 'config', None), 'name', '?')}: the replica's log position is lost and this "
            f"source kind cannot start a new one: remove its tables and add them again"
        )

    def unpublish(self, schema: str, table: str) -> str:
        """A table stops being an HTAP table: stop logging its changes for the replica. Returns
        what was done, in one line."""
        return "nothing to change in the source"

    def drop(self) -> list[str]:
        """The source stops feeding the replica: remove everything the replica created in it
        (slot, publication). Returns what was done, one line each."""
        return ["nothing to drop in the source"]

    def existing_rows_have_value(self, schema: str, table: str, column: str) -> bool:
        """Whether rows that existed before `column` was added hold a value for it without any
        change having been logged for them (a stored or volatile default). Conservative: yes."""
        return True
