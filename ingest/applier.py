"""Applying a source's change events to per-table buffers, one transaction at a time.

Pure bookkeeping, no I/O: the applier knows which transactions are re-sends (at or below the
durable position) and which changes a table's initial copy already holds (at or below its copy
seq), buffers the rest, and tells its caller what it cannot decide alone (a schema change to
follow, a table to copy again, a table that failed) as actions. The scheduler
(`htap.ingest.service`) performs them; the checkpointer drains the buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from htap.connectors.changes import UNSET, Begin, Commit, Event, Progress, Relation, RowBatch, RowChange, Truncate
from htap.errors import HtapError, PoisonError, TableError
from htap.ingest.buffer import TableBuffer
from htap.replica.models import TableInfo


@dataclass(frozen=True)
class FollowSchema:
    """The source's rows for the table now carry other columns (from its next change on)."""

    table_id: int
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Recopy:
    """The table cannot be followed change by change any more: copy it again."""

    table_id: int
    reason: str


@dataclass(frozen=True)
class Failed:
    """A change of the table cannot be applied: the table stops, the source goes on."""

    table_id: int
    error: HtapError
    seq: int | None = None  # the commit sequence of the change


@dataclass(frozen=True)
class Failure:
    """A table that failed since the last checkpoint (recorded with that checkpoint)."""

    table: TableInfo
    error: HtapError
    seq: int | None


Action = FollowSchema | Recopy | Failed


class TransactionApplier:
    """Buffers the changes of the streaming tables of one source (see the module docstring)."""

    def __init__(self, tables: list[TableInfo], decode: Callable[[list, pa.DataType], pa.Array], position: int):
        self.decode = decode
        self.tables: dict[int, TableInfo] = {t.id: t for t in tables}
        self.by_name: dict[tuple[str, str], int] = {(t.schema, t.name): t.id for t in tables}
        self.buffers: dict[int, TableBuffer] = {t.id: TableBuffer(t, decode) for t in tables}
        self.position = position  # durable: transactions at or below it are re-sends
        self.in_txn = False
        self.skip_txn = False
        self.late_txn = False  # the current transaction is older than one applied already
        self.txn_seq = position
        self.last_commit = position
        self.buffered = 0  # changes buffered since the last checkpoint
        self.truncations: list[tuple[int, int]] = []  # (table id, seq) since the last checkpoint
        self.failures: list[Failure] = []  # tables that failed since the last checkpoint

    @property
    def safe_seq(self) -> int:
        """Every commit up to this seq has been applied (valid between transactions)."""
        return max(self.position, self.last_commit)

    def _wanted(self, table_id: int | None) -> bool:
        """Whether the current transaction's changes of this table go into its buffer."""
        return (
            table_id in self.buffers
            and not self.skip_txn
            and self.txn_seq > (self.tables[table_id].copy_seq or 0)
        )

    def apply(self, event: Event) -> Action | None:
        if isinstance(event, RowChange):
            return self._row(event)
        if isinstance(event, RowBatch):
            return self._batch(event)
        if isinstance(event, Begin):
            self.in_txn, self.txn_seq = True, event.seq
            self.skip_txn = self.txn_seq <= self.position
            self.late_txn = not self.skip_txn and self.txn_seq < self.last_commit
        elif isinstance(event, Commit):
            self.in_txn = self.skip_txn = False  # a re-send ends with its transaction
            self.last_commit = max(self.last_commit, event.seq)
        elif isinstance(event, Progress):
            if not self.in_txn:
                self.last_commit = max(self.last_commit, event.seq)
        elif isinstance(event, Relation):
            tid = self.by_name.get((event.schema, event.table))
            stale = self.skip_txn or (self.in_txn and tid in self.tables and not self._wanted(tid))
            if tid in self.buffers and not stale and list(event.columns) != self.buffers[tid].names:
                return FollowSchema(tid, tuple(event.columns))
        elif isinstance(event, Truncate):
            for schema, name in event.tables:
                tid = self.by_name.get((schema, name))
                if self._wanted(tid):
                    if self.late_txn:
                        return self._late(tid)
                    self.buffers[tid].truncate(self.txn_seq)
                    self.truncations.append((tid, self.txn_seq))
        return None

    def _row(self, event: RowChange) -> Action | None:
        tid = self.by_name.get((event.schema, event.table))
        if not self._wanted(tid):
            return None
        if self.late_txn:
            return self._late(tid)
        buf = self.buffers[tid]
        if len(event.values) != len(buf.names):  # never misalign values and columns
            return Recopy(tid, f"a change carried {len(event.values)} columns, the replica has {len(buf.names)}")
        try:
            if event.op == "delete":
                buf.delete(event.values, self.txn_seq)
            elif event.old is not None and buf.key_of(event.old) != buf.key_of(event.values):
                buf.change_key(event.old, event.values, self.txn_seq)  # the key itself changed
            elif event.inserted and UNSET in event.values:
                raise TableError(
                    f"{buf.table.qualified_name}: a new row (key {buf.key_of(event.values)!r}) arrived without some of its "
                    f"values (unchanged TOAST) and no old row to take them from: they cannot be known; copy the table "
                    f"again (htap tables resync)"
                )
            else:
                buf.upsert(event.values, self.txn_seq)
        except HtapError as e:
            return Failed(tid, e, self.txn_seq)
        self.buffered += 1
        return None

    def _batch(self, event: RowBatch) -> Action | None:
        """Many row changes at once: the same outcome as their RowChanges one by one."""
        tid = self.by_name.get((event.schema, event.table))
        if not self._wanted(tid):
            return None
        if self.late_txn:
            return self._late(tid)
        buf = self.buffers[tid]
        if len(event.columns) != len(buf.names):
            return Recopy(tid, f"a change carried {len(event.columns)} columns, the replica has {len(buf.names)}")
        try:
            buf.append_batch(event.columns, self.txn_seq, delete=event.op == "delete")
        except HtapError as e:
            return Failed(tid, e, self.txn_seq)
        self.buffered += len(event)
        return None

    def _late(self, table_id: int) -> Recopy:
        """A change at a seq below a transaction applied already (Debezium snapshot records of
        another Kafka partition, consumed after later transactions) would be an older version
        written after newer ones, which reads and deletion vectors take as the newest: the table
        is copied again instead (its copy holds the change)."""
        return Recopy(
            table_id,
            f"changes at seq {self.txn_seq} arrived after a transaction at seq {self.last_commit} was applied "
            f"(snapshot records of another partition)",
        )

    def drop(self, table_id: int) -> None:
        """Stop following a table (re-copied or failed); its buffered changes are discarded."""
        self.buffers.pop(table_id, None)
        table = self.tables.pop(table_id, None)
        if table is not None:
            self.by_name.pop((table.schema, table.name), None)
        self.truncations = [(t, s) for t, s in self.truncations if t != table_id]

    def fail(self, table_id: int, error: HtapError, seq: int | None) -> None:
        """The table cannot be followed any more: stop following it; the failure is recorded
        with the next checkpoint (in the same metadata transaction as the other tables' data)."""
        table = self.tables.get(table_id)
        if table is not None:
            self.failures.append(Failure(table, error, seq))
        self.drop(table_id)

    def retable(self, table: TableInfo) -> None:
        """The table's logical schema changed (metadata only): later changes use the new one."""
        self.tables[table.id] = table
        self.buffers[table.id].retable(table)

    def pending(self) -> bool:
        return any(b.pending() for b in self.buffers.values()) or bool(self.truncations) or bool(self.failures)

    def publish(self) -> tuple[dict[int, pa.Table], set[int]]:
        """For the in-memory tail (htap.ingest.tail; call between transactions): per table, the
        changes buffered since the last publish, decoded, and the tables whose tail is whole up to
        `safe_seq` — not one with a truncation, a schema change or a moved partial row since the
        last checkpoint, nor one whose values fail to decode (the checkpoint fails it, naming them)."""
        truncated = {t for t, _ in self.truncations}
        parts, ok = {}, set()
        for tid, b in self.buffers.items():
            try:
                rows = b.publish()
            except PoisonError:
                continue  # not whole any more: the checkpoint drains and fails the table
            if rows is not None:
                parts[tid] = rows
            if tid not in truncated and b.servable():
                ok.add(tid)
        return parts, ok

    def drain(self) -> tuple[list[tuple[TableInfo, pa.Table]], list[tuple[int, int]], list[Failure]]:
        """Everything buffered since the last checkpoint, per table and schema, the truncations
        and the tables that failed; the buffers start empty. A table whose buffered values
        cannot be decoded fails here (its poison named), the others are unaffected."""
        parts = []
        for tid, b in list(self.buffers.items()):
            if not b.pending():
                continue
            try:
                parts += b.drain_all()
            except PoisonError as e:
                self.fail(tid, e, e.seq)
        truncations, self.truncations = self.truncations, []
        failures, self.failures = self.failures, []
        self.buffered = 0
        return parts, truncations, failures

    def checkpointed(self, position: int, tables: dict[int, TableInfo]) -> None:
        """Everything up to `position` is durable; `tables` are the followed tables as stored now
        (a table missing from it was removed meanwhile: it is not followed any more)."""
        self.position = position
        for tid in list(self.tables):
            if tid in tables:
                self.tables[tid] = tables[tid]
            else:
                self.drop(tid)
