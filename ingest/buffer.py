"""Buffered changes of one table between checkpoints, kept as Python lists per column.

The stream appends one list element per value (the protocol decoder already touched each value
once); everything after that — type decoding, sorting, collapsing — is vectorized.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

from htap.connectors.changes import UNSET, decode_checked, python_values
from htap.errors import HtapError, PoisonError
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, ORD, SEQ, UNSET_MASK, TableInfo

MAX_PARTIAL_COLUMNS = 63  # the unset mask is an int64 bitmask


class SchemaChanged(HtapError):
    """The source table's columns no longer match the replica's."""


class TableBuffer:
    def __init__(self, table: TableInfo, decode: Callable[[list, pa.DataType], pa.Array] = python_values):
        """`decode` turns one buffered column into Arrow (the source's ChangeSource.decode_column)."""
        self.table = table
        self.decode = decode
        self.names = [c.name for c in table.columns]
        self.key_positions = [self.names.index(k) for k in table.key]
        self.frozen: list[tuple[TableInfo, tuple]] = []  # (table, undecoded rows) under older schemas
        self._reset()

    def retable(self, table: TableInfo) -> None:
        """The table's logical schema changed: rows buffered so far keep the old one (they are
        decoded at the next drain, like the rest)."""
        if len(self):
            self.frozen.append((self.table, self._rows()))
        self.table = table
        self.names = [c.name for c in table.columns]
        self.key_positions = [self.names.index(k) for k in table.key]
        self._reset()

    def drain_all(self) -> list[tuple[TableInfo, pa.Table]]:
        """Everything buffered, each part with the table schema it was buffered under; empties
        the buffer. PoisonError when a value cannot be decoded (the buffer is empty then too)."""
        rows = self.frozen + ([(self.table, self._rows())] if len(self) else [])
        self.frozen = []
        self._reset()
        return [(table, self._decode(table, *raw)) for table, raw in rows]

    def pending(self) -> bool:
        return bool(self.frozen) or len(self) > 0

    def _reset(self) -> None:
        self.columns: list[list] = [[] for _ in self.names]
        self.seqs: list[int] = []
        self.ops: list[int] = []
        self.unset: list[int] = []
        self.latest: dict[tuple, int] = {}  # key -> position of its newest buffered version

    def __len__(self) -> int:
        return len(self.seqs)

    def check_columns(self, columns: tuple[str, ...]) -> None:
        if list(columns) != self.names:
            raise SchemaChanged(
                f"{self.table.qualified_name} changed in the source: columns are now {list(columns)}, "
                f"the replica has {self.names}"
            )

    def upsert(self, values: list, seq: int) -> None:
        key = self.key_of(values)
        mask = 0
        if UNSET in values:
            values, mask = self._fill(key, values)
        self.latest[key] = len(self.seqs)
        for col, v in zip(self.columns, values):
            col.append(v)
        self.seqs.append(seq)
        self.ops.append(OP_UPSERT)
        self.unset.append(mask)

    def _fill(self, key: tuple, values: list) -> tuple[list, int]:
        """A partial row: fill unset values from the key's newest buffered version if there is
        one; what stays unset is marked in the mask and filled from older deltas when read."""
        prev = self.latest.get(key)
        usable = prev is not None and self.ops[prev] == OP_UPSERT
        filled, mask = [], 0
        for i, v in enumerate(values):
            if v is UNSET:
                if i >= MAX_PARTIAL_COLUMNS:
                    raise SchemaChanged(
                        f"{self.table.qualified_name}: a partial update left column {self.names[i]!r} unset, and only "
                        f"the first {MAX_PARTIAL_COLUMNS} columns can be; set REPLICA IDENTITY FULL on the source table"
                    )
                if usable:
                    v = self.columns[i][prev]
                    mask |= self.unset[prev] & (1 << i)
                else:
                    v, mask = None, mask | (1 << i)
            filled.append(v)
        return filled, mask

    def delete(self, old: list, seq: int) -> None:
        """`old` holds at least the key columns; the rest is not kept."""
        self.latest[self.key_of(old)] = len(self.seqs)
        for i, col in enumerate(self.columns):
            col.append(old[i] if i in self.key_positions else None)
        self.seqs.append(seq)
        self.ops.append(OP_DELETE)
        self.unset.append(0)

    def truncate(self, seq: int) -> None:
        """The table was truncated in the transaction at `seq`: that transaction's earlier rows
        are gone. Older versions stay: reads below `seq` still see them (the truncation hides
        them from reads at or above it)."""
        while self.seqs and self.seqs[-1] == seq:
            for col in self.columns:
                col.pop()
            self.seqs.pop()
            self.ops.pop()
            self.unset.pop()
        self.latest.clear()  # no version from before the truncation can be a row's base

    def key_of(self, values: list) -> tuple:
        return tuple(values[i] for i in self.key_positions)

    def drain(self) -> pa.Table:
        """The buffered changes as an Arrow table (typed columns, _seq, _op, _unset, _ord); empties the buffer."""
        raw = self._rows()
        self._reset()
        return self._decode(self.table, *raw)

    def _rows(self) -> tuple:
        return self.columns, self.seqs, self.ops, self.unset

    def _decode(self, table: TableInfo, columns: list[list], seqs: list[int], ops: list[int], unset: list[int]) -> pa.Table:
        """Buffered rows -> Arrow, one vectorized decode per column. A value the column's replica
        type cannot hold is a PoisonError naming the column, the value and its change's seq."""
        names = [c.name for c in table.columns]
        arrays = []
        for col, f in zip(columns, table.arrow_schema):
            try:
                arrays.append(decode_checked(self.decode, col, f.type, f.name))
            except PoisonError as e:
                if e.row is not None and e.row < len(seqs):
                    e.seq = seqs[e.row]
                raise
        n = len(seqs)
        arrays += [
            pa.array(seqs, pa.int64()),
            pa.array(ops, pa.int8()),
            pa.array(unset, pa.int64()),
            pa.array(range(n), pa.int64()),
        ]
        return pa.Table.from_arrays(arrays, names=[*names, SEQ, OP, UNSET_MASK, ORD])
