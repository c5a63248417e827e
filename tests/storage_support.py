"""A replica table driven directly (no CDC source): for storage-level tests and benchmarks."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa

from htap.connectors.changes import UNSET
from htap.ingest.buffer import TableBuffer
from htap.pushdown.replica_reader import JoinedTableRead, read_joined, read_plan
from htap.replica.deltas import write_partitioned
from htap.replica.metadata import MetadataStore
from htap.replica.models import OP, OP_DELETE, SEQ, Column, TableInfo, encode_schema
from htap.replica.partitions import encode_bounds
from htap.replica.read_plans import plan_reads
from htap.replica.view_maintenance import ViewShape
from htap.rewrite.pushed import PushedPlan, table_plan

SOURCE = "mem"


class DirectTable:
    """Writes versions the way the ingest service does: buffer -> partitioned deltas -> checkpoint."""

    def __init__(self, root: Path, schema: pa.Schema, key: list[str], splits: list | None, metadata=None, clock=time.time):
        self.warehouse = root / "warehouse"
        self.store = MetadataStore(metadata or root / "metadata.db", create=True, clock=clock)
        columns = [Column(f.name, str(f.type), True) for f in schema]
        t = self.store.add_table(SOURCE, "public", f"t{id(self)}", columns, key, encode_schema(schema))
        self.store.start_copy(t.id)
        bounds = encode_bounds(pa.array(splits, schema.field(key[0]).type)) if splits else None
        self.store.finish_copy(t.id, [], 0, bounds)
        self.store.commit_checkpoint(SOURCE, [], 0, self.store.clock())
        self.table: TableInfo = self.store.table_by_id(t.id)
        self.buffer = TableBuffer(self.table)
        self.truncations: list[tuple[int, int]] = []
        self.seq = 0

    @classmethod
    def reopen(cls, root: Path, table_id: int, clock=time.time) -> "DirectTable":
        """The writer of an existing table (e.g. after the process that wrote it was killed)."""
        self = cls.__new__(cls)
        self.warehouse = root / "warehouse"
        self.store = MetadataStore(root / "metadata.db", clock=clock)
        self.table = self.store.table_by_id(table_id)
        self.buffer = TableBuffer(self.table)
        self.truncations = []
        self.seq = self.table.max_safe_seq or 0
        return self

    def upsert(self, values: list, seq: int) -> None:
        self.buffer.upsert(values, seq)

    def change_key(self, old: list, values: list, seq: int) -> None:
        """An update that moved the row of `old`'s key to `values`' key (UNSET: unchanged)."""
        self.buffer.change_key(old, values, seq)

    def delete(self, key_values: list, seq: int) -> None:
        self.buffer.delete(key_values, seq)

    def truncate(self, seq: int) -> None:
        self.buffer.truncate(seq)
        self.truncations.append((self.table.id, seq))

    def checkpoint(self, seq: int, changed: list | None = None) -> None:
        """As the checkpointer: each delta records the versions it supersedes (deletion
        vectors) under its partition's writer lock, held until the commit. `changed`: as
        write_partitioned's (what the checkpoint changes, for views)."""
        with ExitStack() as locks:
            deltas = (write_partitioned(self.warehouse, self.table, self.buffer.drain(), self.live, locks, self.store,
                                        changed) if len(self.buffer) else [])
            self.store.commit_checkpoint(SOURCE, deltas, seq, self.store.clock(), self.truncations)
        self.truncations = []
        self.seq = seq
        self.table = self.store.table_by_id(self.table.id)

    def live(self, part: int) -> list[str]:
        return [d.path for d in self.store.deltas(self.table.id, part)]

    def plans(self, seq: int) -> list:
        """The read plans of every partition at `seq`, in the layout of that seq."""
        store, tid = self.store, self.table.id
        return plan_reads(self.table, store.deltas_at(tid, seq), seq, store.truncated_at(tid, seq),
                          layout=store.layout_at(tid, seq))

    def read(self, seq: int, plan: PushedPlan | None = None, out: pa.Schema | None = None) -> pa.Table:
        """The table at `seq`, partition by partition, through `plan` (default: every column)."""
        schema = self.table.arrow_schema
        pushed = plan or table_plan(self.table.qualified_name, schema.names)
        out = out or schema
        batches = []
        for read in self.plans(seq):
            batches += list(
                read_plan(self.warehouse, self.table.qualified_name, schema, list(self.table.key), read, pushed, out)
            )
        return pa.Table.from_batches(batches, schema=out)

    def read_one_task(self, seq: int) -> pa.Table:
        """Every partition at `seq` in one DuckDB query, as a one-task scan reads them (the
        partitions' deletion vectors loaded together, htap.replica.dv.load)."""
        schema = self.table.arrow_schema
        read = JoinedTableRead(self.table.qualified_name, schema, list(self.table.key), tuple(self.plans(seq)))
        every = table_plan(self.table.qualified_name, schema.names)
        return pa.Table.from_batches(list(read_joined(self.warehouse, [read], every, schema)), schema=schema)


def apply_change(table: DirectTable, state: dict, op: str, k, values: list | None, seq: int) -> None:
    """One drawn change, to `table` and to the model `state` (key -> row): "upsert" (`values`:
    the row), "partial" (`values`: the key's row with UNSET where unchanged), "move" (key `k`'s
    row to the key `values[0]`, UNSET values unchanged), "delete" or "truncate"."""
    width = len(table.table.arrow_schema)
    if op == "upsert":
        table.upsert(values, seq)
        state[values[0]] = values
    elif op == "partial":
        table.upsert(values, seq)
        state[k] = [old if new is UNSET else new for new, old in zip(values, state[k])]
    elif op == "move":
        table.change_key([k] + [None] * (width - 1), values, seq)
        state[values[0]] = [old if new is UNSET else new for new, old in zip(values, state.pop(k))]
    elif op == "delete":
        table.delete([k] + [None] * (width - 1), seq)
        del state[k]
    else:
        table.truncate(seq)
        state.clear()


class ManualClock:
    """A wall clock that moves only when told to (pin expiry, windows and safe points in tests)."""

    def __init__(self, start: float = 1_000_000.0):
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class ViewVersions:
    """A view's versions (htap.replica.view_maintenance.group_changes) and truncations, kept and
    read at a seq as the replica keeps and reads a table."""

    def __init__(self, shape: ViewShape):
        self.shape = shape
        self.versions: dict = {}  # group -> [(seq, states or None)]
        self.truncations: list[int] = []

    def add(self, rows: pa.Table, truncations: list[int]) -> None:
        self.truncations += truncations
        for r in rows.to_pylist():
            group = tuple(r[c] for c in self.shape.groups)
            states = None if r[OP] == OP_DELETE else tuple(r[c] for c in self.shape.state_columns())
            self.versions.setdefault(group, []).append((r[SEQ], states))

    def at(self, seq: int) -> dict:
        floor = max([t for t in self.truncations if t <= seq], default=None)
        out = {}
        for group, versions in self.versions.items():
            seen = [(s, states) for s, states in versions if s <= seq and (floor is None or s >= floor)]
            if seen and seen[-1][1] is not None:
                out[group] = seen[-1][1]
        return out

    def states_table(self, seq: int) -> pa.Table:
        rows = [dict(zip(self.shape.groups, g)) | dict(zip(self.shape.state_columns(), s)) for g, s in self.at(seq).items()]
        fields = [pa.field(c, pa.int64()) for c in self.shape.groups + tuple(self.shape.state_columns())]
        return pa.Table.from_pylist(rows, schema=pa.schema(fields))
