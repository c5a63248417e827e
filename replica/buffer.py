"""Buffered changes of one table between checkpoints, kept as columns of source text.

The stream appends one Python list element per value (the protocol decoder already touches each
value once); everything after that — type decoding, sorting, collapsing — is vectorized.
"""

from __future__ import annotations

import pyarrow as pa

from htap.connectors.pgoutput import UNCHANGED_TOAST
from htap.connectors.pgtypes import decode_text_column
from htap.errors import HtapError
from htap.replica.deltas import ORD
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ, TableInfo


class SchemaChanged(HtapError):
    """The source table's columns no longer match the replica's."""


class PartialRowUnsupported(HtapError):
    """The source sent a row without some of its values (unchanged TOAST)."""


class TableBuffer:
    def __init__(self, table: TableInfo):
        self.table = table
        self.names = [c.name for c in table.columns]
        self.key_positions = [self.names.index(k) for k in table.key]
        self.columns: list[list] = [[] for _ in self.names]
        self.seqs: list[int] = []
        self.ops: list[int] = []

    def __len__(self) -> int:
        return len(self.seqs)

    def set_relation(self, columns: tuple[str, ...]) -> None:
        if list(columns) != self.names:
            raise SchemaChanged(
                f"{self.table.qualified_name} changed in the source: columns are now {list(columns)}, "
                f"the replica has {self.names}; schema changes mid-stream are not supported yet"
            )

    def upsert(self, values: list, seq: int) -> None:
        if UNCHANGED_TOAST in values:
            raise PartialRowUnsupported(
                f"{self.table.qualified_name}: an update did not carry an unchanged large (TOAST) value; "
                f"set REPLICA IDENTITY FULL on the source table until partial updates are supported"
            )
        for col, v in zip(self.columns, values):
            col.append(v)
        self.seqs.append(seq)
        self.ops.append(OP_UPSERT)

    def delete(self, old: list, seq: int) -> None:
        """`old` is the source's old-key tuple: key columns set, the rest null."""
        for i, col in enumerate(self.columns):
            col.append(old[i] if i in self.key_positions else None)
        self.seqs.append(seq)
        self.ops.append(OP_DELETE)

    def key_of(self, values: list) -> tuple:
        return tuple(values[i] for i in self.key_positions)

    def drain(self) -> pa.Table:
        """The buffered changes as an Arrow table (typed columns, _seq, _op, _ord); empties the buffer."""
        arrays = typed_columns([pa.array(col, pa.string()) for col in self.columns], self.table.arrow_schema)
        n = len(self.seqs)
        arrays += [pa.array(self.seqs, pa.int64()), pa.array(self.ops, pa.int8()), pa.array(range(n), pa.int64())]
        data = pa.Table.from_arrays(arrays, names=[*self.names, SEQ, OP, ORD])
        self.columns = [[] for _ in self.names]
        self.seqs, self.ops = [], []
        return data


def typed_columns(text_columns: list[pa.Array], schema: pa.Schema) -> list[pa.Array]:
    """Source text columns -> Arrow arrays of the replica's column types (vectorized)."""
    return [decode_text_column(col, f.type) for col, f in zip(text_columns, schema)]
