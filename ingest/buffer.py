"""Buffered changes of one table between checkpoints, kept column-wise.

A row change appends one list element per value (the protocol decoder already touched each value
once); a batch of changes (`RowBatch`) appends its columns as they are (Arrow arrays of text from
the Postgres stream), with no step per row. Everything after that — type decoding, sorting,
collapsing — is vectorized.
"""

from __future__ import annotations

import bisect
from itertools import repeat
from typing import Callable

import pyarrow as pa

from htap.connectors.changes import UNSET, decode_checked, python_values
from htap.errors import HtapError, MovedKeyValuesUnknown, PoisonError
from htap.replica.models import BASE_PREFIX, OP, OP_DELETE, OP_UPSERT, ORD, SEQ, UNSET_MASK, TableInfo

MAX_PARTIAL_COLUMNS = 63  # the unset mask is an int64 bitmask


class SchemaChanged(HtapError):
    """The source table's columns no longer match the replica's."""


class TableBuffer:
    def __init__(self, table: TableInfo, decode: Callable[[list, pa.DataType], pa.Array] = python_values):
        """`decode` turns one buffered column into Arrow (the source's ChangeSource.decode_column)."""
        self.table = table
        self.decode = decode
        self._columns_of(table)
        self.frozen: list[tuple[TableInfo, tuple]] = []  # (table, undecoded rows) under older schemas
        self._reset()

    def _columns_of(self, table: TableInfo) -> None:
        self.names = [c.name for c in table.columns]
        self.key_positions = [self.names.index(k) for k in table.key]
        self.is_key = [i in self.key_positions for i in range(len(self.names))]

    def retable(self, table: TableInfo) -> None:
        """The table's logical schema changed: rows buffered so far keep the old one (they are
        decoded at the next drain, like the rest)."""
        if len(self):
            self.frozen.append((self.table, self._rows()))
        self.table = table
        self._columns_of(table)
        self._reset()

    def drain_all(self) -> list[tuple[TableInfo, pa.Table]]:
        """Everything buffered, each part with the table schema it was buffered under; empties
        the buffer. PoisonError when a value cannot be decoded (the buffer is empty then too)."""
        published = self._all_published()
        if published is not None:
            self._reset()
            return [(self.table, published)]
        rows = self.frozen + ([(self.table, self._rows())] if len(self) else [])
        self.frozen = []
        self._reset()
        return [(table, self._decode(table, *raw)) for table, raw in rows]

    def _all_published(self) -> pa.Table | None:
        """Every buffered row as the in-memory tail's publishes decoded them (the same rows and
        types `_decode` gives, `_ord` counted across publishes), when they cover the buffer and
        it holds nothing else a checkpoint needs (rows under older schemas, moved partial rows'
        old keys): the checkpoint then decodes nothing again."""
        if not self.published_rows or self.published != len(self) or not self.servable():
            return None
        return pa.concat_tables(self.published_rows)

    def pending(self) -> bool:
        return bool(self.frozen) or len(self) > 0

    def _reset(self) -> None:
        # Rows are kept column-wise in parts, in arrival order: sealed parts (a batch's arrays,
        # or per-row lists sealed when a batch arrived), then the open part, one list per column.
        self.parts: list[list] = []  # per part: one sequence (list or Arrow array) per column
        self.part_starts: list[int] = []  # the row number of each part's first row
        self.columns: list[list] = [[] for _ in self.names]  # the open part
        self.open_start = 0  # the row number of the open part's first row
        self.seqs: list[int] = []
        self.ops: list[int] = []
        self.unset: list[int] = []
        # key -> row number of its newest buffered version, for rows [0, indexed): kept up to date
        # only when a partial row needs it (`_fill`), so full rows cost no key lookup.
        self.latest: dict[tuple, int] = {}
        self.indexed = 0
        # row number -> the old key (as delivered) whose newest version in the replica's live
        # deltas fills the row's unset columns, for partial rows that got them through a key
        # change; every other partial row fills from its own key's older versions.
        self.bases: dict[int, tuple] = {}
        self.published = 0  # rows [0, published) were handed to the in-memory tail (`publish`)
        self.published_rows: list[pa.Table] = []  # what `publish` returned, in order
        self.publish_failed = False  # some rows could not be decoded for it: not servable until drained

    def __len__(self) -> int:
        return len(self.seqs)

    def check_columns(self, columns: tuple[str, ...]) -> None:
        if list(columns) != self.names:
            raise SchemaChanged(
                f"{self.table.qualified_name} changed in the source: columns are now {list(columns)}, "
                f"the replica has {self.names}"
            )

    def upsert(self, values: list, seq: int) -> None:
        mask, base = 0, None
        if UNSET in values:
            values, mask, base = self._fill(values, self.key_of(values))
        self._append(values, seq, mask, base)

    def change_key(self, old: list, values: list, seq: int) -> None:
        """An update that moved a row from the key of `old` (at least its key columns) to the key
        of `values`: the old key's delete, then the new row. Values it did not send (unchanged
        TOAST) are the OLD key's: from its newest buffered version, else (`bases`) from its newest
        version in the replica's live deltas when written (htap.replica.deltas). A table whose old
        key has no version to take them from fails (TableError), never stores NULL."""
        old_key = self.key_of(old)
        mask, base = 0, None
        if UNSET in values:
            values, mask, base = self._fill(values, old_key, moved=True)
        self.delete(old, seq)
        self._append(values, seq, mask, base)

    def _append(self, values: list, seq: int, mask: int, base: tuple | None) -> None:
        if mask and base is not None:
            self.bases[len(self.seqs)] = base
        for col, v in zip(self.columns, values):
            col.append(v)
        self.seqs.append(seq)
        self.ops.append(OP_UPSERT)
        self.unset.append(mask)

    def _fill(self, values: list, source: tuple, moved: bool = False) -> tuple[list, int, tuple | None]:
        """A partial row: fill unset values from the newest buffered version of key `source`
        (its own key; the old key of a key change, `moved`) if there is one; what stays unset is
        marked in the mask and filled when written: from the row's own older versions (base None),
        or, when a key change is involved (this one, or one the buffered version came through),
        from the newest live version of the returned base key."""
        self._index()
        prev = self.latest.get(source)
        usable = prev is not None and self.ops[prev] == OP_UPSERT
        if moved and prev is not None and not usable:
            raise MovedKeyValuesUnknown(self.table.qualified_name, f"{source!r} to {self.key_of(values)!r}",
                                        f"key {source!r} was deleted before it")
        # A moved row's unset values are the old key's as before this checkpoint (its newest live
        # version), even when the row later moves back to that key past versions of it (`bases`).
        moved_base = source if moved else None
        base = self.bases.get(prev, moved_base) if usable else moved_base
        filled, mask = [], 0
        for i, v in enumerate(values):
            if v is UNSET:
                if i >= MAX_PARTIAL_COLUMNS:
                    raise SchemaChanged(
                        f"{self.table.qualified_name}: a partial update left column {self.names[i]!r} unset, and only "
                        f"the first {MAX_PARTIAL_COLUMNS} columns can be; set REPLICA IDENTITY FULL on the source table"
                    )
                if usable:
                    v = self._value(i, prev)
                    mask |= self.unset[prev] & (1 << i)
                else:
                    v, mask = None, mask | (1 << i)
            filled.append(v)
        return filled, mask, base

    def _index(self) -> None:
        """Bring `latest` up to date with every buffered row."""
        n = len(self.seqs)
        if self.indexed == n:
            return
        keys = [self._column_values(i, self.indexed, n) for i in self.key_positions]
        latest = self.latest
        for row, key in enumerate(zip(*keys), start=self.indexed):
            latest[key] = row
        self.indexed = n

    def _column_values(self, i: int, lo: int, hi: int) -> list:
        """Column i of rows [lo, hi) as Python values (as the source delivered them)."""
        out: list = []
        for part, start in [*zip(self.parts, self.part_starts), (self.columns, self.open_start)]:
            rows = _slice(part[i], start, lo, hi)
            out += rows.to_pylist() if isinstance(rows, pa.Array) else rows
        return out

    def _value(self, i: int, row: int):
        if row >= self.open_start:
            return self.columns[i][row - self.open_start]
        k = bisect.bisect_right(self.part_starts, row) - 1
        seq = self.parts[k][i]
        v = seq[row - self.part_starts[k]]
        return v.as_py() if isinstance(v, pa.Scalar) else v

    def delete(self, old: list, seq: int) -> None:
        """`old` holds at least the key columns; the rest is not kept."""
        for i, (col, is_key) in enumerate(zip(self.columns, self.is_key)):
            col.append(old[i] if is_key else None)
        self.seqs.append(seq)
        self.ops.append(OP_DELETE)
        self.unset.append(0)

    def append_batch(self, columns: list, seq: int, delete: bool = False) -> None:
        """Many full rows (upserts) or deletes (only the key columns matter) of the transaction at
        `seq` at once, column-wise: one sequence per column (e.g. Arrow arrays), no UNSET values.
        The same outcome as `upsert` / `delete` row by row."""
        n = len(columns[0]) if columns else 0
        if n == 0:
            return
        if delete:
            columns = [
                col if is_key else (pa.nulls(n, col.type) if isinstance(col, pa.Array) else [None] * n)
                for col, is_key in zip(columns, self.is_key)
            ]
        self._seal()
        self.parts.append(list(columns))
        self.part_starts.append(len(self.seqs))
        self.seqs += repeat(seq, n)
        self.ops += repeat(OP_DELETE if delete else OP_UPSERT, n)
        self.unset += repeat(0, n)
        self.open_start = len(self.seqs)

    def _seal(self) -> None:
        """Close the open part (if it holds rows): later rows start a new part."""
        if len(self.seqs) > self.open_start:
            self.parts.append(self.columns)
            self.part_starts.append(self.open_start)
            self.columns = [[] for _ in self.names]
            self.open_start = len(self.seqs)

    def truncate(self, seq: int) -> None:
        """The table was truncated in the transaction at `seq`: that transaction's earlier rows
        are gone. Older versions stay: reads below `seq` still see them (the truncation hides
        them from reads at or above it)."""
        keep = len(self.seqs)
        while keep and self.seqs[keep - 1] == seq:
            keep -= 1
        self._cut(keep)
        self.bases = {r: k for r, k in self.bases.items() if r < keep}
        self.latest.clear()  # no version from before the truncation can be a row's base
        self.indexed = keep

    def _cut(self, keep: int) -> None:
        """Keep the first `keep` rows."""
        if keep < self.open_start:
            while self.part_starts and self.part_starts[-1] >= keep:
                self.parts.pop()
                self.part_starts.pop()
            if self.parts:
                size = keep - self.part_starts[-1]
                self.parts[-1] = [c.slice(0, size) if isinstance(c, pa.Array) else c[:size] for c in self.parts[-1]]
            self.columns = [[] for _ in self.names]
            self.open_start = keep
        for col in self.columns:
            del col[keep - self.open_start:]
        del self.seqs[keep:], self.ops[keep:], self.unset[keep:]

    def key_of(self, values: list) -> tuple:
        return tuple(values[i] for i in self.key_positions)

    def servable(self) -> bool:
        """Whether the rows buffered since the last checkpoint, as `publish` hands them out, are
        all a reader needs: not so when some were buffered under an older schema (`frozen`) or
        a partial row moved keys (`bases`: its values come from the replica's deltas when written),
        or when some could not be decoded."""
        return not self.frozen and not self.bases and not self.publish_failed

    def publish(self) -> pa.Table | None:
        """The rows buffered since the last call (or the last drain), decoded like `drain` does
        (`_ord`: their row numbers in the buffer), without emptying the buffer; None if there are
        none. Call between transactions only: a publish never holds part of one. A checkpoint
        drains what was published as it is (`_all_published`): the tail costs no second decode."""
        n = len(self.seqs)
        if n == self.published:
            return None
        low, self.published = self.published, n
        self._seal()
        columns = [[_slice(part[i], start, low, n) for part, start in zip(self.parts, self.part_starts)
                    if start + len(part[i]) > low] for i in range(len(self.names))]
        try:
            rows = self._decode(self.table, columns, self.seqs[low:], self.ops[low:], self.unset[low:], {}, low)
        except PoisonError:
            self.publish_failed = True
            raise
        self.published_rows.append(rows)
        return rows

    def drain(self) -> pa.Table:
        """The buffered changes as an Arrow table (typed columns, _seq, _op, _unset, _ord); empties the buffer."""
        published = self._all_published()
        if published is not None:
            self._reset()
            return published
        raw = self._rows()
        self._reset()
        return self._decode(self.table, *raw)

    def _rows(self) -> tuple:
        """The buffered rows: per column, its parts' sequences in row order; seqs, ops, masks."""
        self._seal()
        columns = [[part[i] for part in self.parts] for i in range(len(self.names))]
        return columns, self.seqs, self.ops, self.unset, self.bases

    def _decode(self, table: TableInfo, columns: list[list], seqs: list[int], ops: list[int], unset: list[int],
                bases: dict[int, tuple], first_row: int = 0) -> pa.Table:
        """Buffered rows -> Arrow, one vectorized decode per column (`first_row`: the buffer's row
        number of the first, counted on in `_ord`). A value the column's replica type cannot hold
        is a PoisonError naming the column, the value and its change's seq."""
        names = [c.name for c in table.columns]
        arrays = []
        for parts, f in zip(columns, table.arrow_schema):
            try:
                arrays.append(decode_checked(self.decode, _joined(parts), f.type, f.name))
            except PoisonError as e:
                if e.row is not None and e.row < len(seqs):
                    e.seq = seqs[e.row]
                raise
        n = len(seqs)
        arrays += [
            pa.array(seqs, pa.int64()),
            pa.array(ops, pa.int8()),
            pa.array(unset, pa.int64()),
            pa.array(range(first_row, first_row + n), pa.int64()),
        ]
        extra = []
        if bases:  # key-changing partial rows: their old keys, NULL elsewhere
            schema = table.arrow_schema
            for j, k in enumerate(table.key):
                values = [None] * n
                for row, base in bases.items():
                    values[row] = base[j]
                arrays.append(decode_checked(self.decode, values, schema.field(k).type, k))
                extra.append(BASE_PREFIX + k)
        return pa.Table.from_arrays(arrays, names=[*names, SEQ, OP, UNSET_MASK, ORD, *extra])


def _slice(seq, start: int, low: int, high: int):
    """The rows [low, high) of a part (a list or an Arrow array) whose first row is row `start`."""
    a, b = max(low - start, 0), min(high - start, len(seq))
    b = max(a, b)  # a part wholly outside the range: nothing of it
    return seq.slice(a, b - a) if isinstance(seq, pa.Array) else seq[a:b]


def _joined(parts: list):
    """One column's parts as one sequence to decode: a list when every part is a list (values as
    the source delivered them), else one Arrow array of the batches' type (lists converted)."""
    arrow = next((p for p in parts if isinstance(p, pa.Array)), None)
    if arrow is None:
        return parts[0] if len(parts) == 1 else [v for p in parts for v in p]  # [] for no rows
    if len(parts) == 1:
        return arrow
    return pa.concat_arrays([p if isinstance(p, pa.Array) else pa.array(p, arrow.type) for p in parts])
