"""Models of the replica's metadata. Frozen: they cross process boundaries (Spark executors)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pyarrow as pa

from htap.connectors.tables import Column

# Bookkeeping columns every delta carries next to the table's own columns.
SEQ = "_seq"  # commit sequence of the version (Postgres: end LSN of the commit record)
OP = "_op"  # OP_UPSERT or OP_DELETE
UNSET_MASK = "_unset"  # bit i set: column i was not sent (partial update), take it from an older version
ORD = "_ord"  # arrival order inside a batch (only before a delta is written)
# `_base:<key column>`: a key-changing partial update's old key (only before a delta is written):
# its unset columns come from that key's newest version in the replica's live deltas.
BASE_PREFIX = "_base:"
OP_UPSERT = 0
OP_DELETE = 1

# Kinds of replica tables: a source's table, or a derived view of one (htap.replica.metadata_views).
KIND_TABLE = "table"
KIND_VIEW = "view"
VIEWS_SCHEMA = "views"  # the schema views are named in (`<catalog>.views.<name>`)

# Table states.
STATE_PENDING = "pending"  # added, initial copy not started
STATE_COPYING = "copying"  # initial copy running; not readable
STATE_CATCHING_UP = "catching_up"  # copied; the change stream has not yet reached the copy point
STATE_STREAMING = "streaming"  # readable, kept fresh by the change stream
STATE_UNHEALTHY = "unhealthy"  # its files are damaged; queries must fail over to the source
STATE_FAILED = "failed"  # a change or value could not be applied: not followed any more; queries fail
# over to the source; `error` says what and how to fix it (then `htap tables recopy`, or automatically
# when the source changes the table's columns)


@dataclass(frozen=True)
class TableInfo:
    id: int
    source: str
    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    arrow_schema_b64: str  # the table's own columns as an Arrow schema (IPC, base64)
    state: str
    copy_seq: int | None  # the seq the initial copy reflects
    max_safe_seq: int | None
    max_safe_time: float | None  # wall clock (epoch s) at which max_safe_seq was known current
    error: str | None
    partition_bounds_b64: str | None = None  # split points on the first key column (Arrow IPC)
    failover: bool = False  # reads go to the source
    max_staleness_s: float | None = None  # older replica state fails reads over to the source
    schema_version: int = 1  # logical schema version; each delta records the one it was written in
    partition_ids: tuple[int, ...] | None = None  # id of each current partition (None: 0, 1, ...)
    kind: str = KIND_TABLE  # KIND_VIEW: a derived view, kept from its base table's checkpoints

    @property
    def layout(self) -> "Layout":
        """The current partition layout (htap.replica.repartition changes it online)."""
        return Layout.of(self.partition_bounds_b64, self.partition_ids)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.decode_schema(self.arrow_schema_b64)

    @staticmethod
    def decode_schema(b64: str) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(b64)))

    @property
    def readable(self) -> bool:
        return self.state == STATE_STREAMING and self.max_safe_seq is not None


@dataclass(frozen=True)
class Layout:
    """A table's range partitions at some seqs: split points on the first key column (Arrow
    IPC; partition i holds keys in [split[i-1], split[i])) and the id of each partition.

    Ids are never reused within a table: a split or merge gives its outputs new ids and leaves
    the old partitions (and their deltas) to reads at seqs below `from_seq`, the seq from
    which this layout holds (htap.replica.repartition)."""

    bounds_b64: str | None
    ids: tuple[int, ...]
    from_seq: int | None = None

    @classmethod
    def of(cls, bounds_b64: str | None, ids, from_seq: int | None = None) -> "Layout":
        from htap.replica.partitions import decode_bounds, partition_count

        if ids is None:
            ids = tuple(range(partition_count(decode_bounds(bounds_b64))))
        return cls(bounds_b64, tuple(ids), from_seq)


def delta_schema(table_schema: pa.Schema) -> pa.Schema:
    """Schema of a delta file: the table's columns plus the version bookkeeping."""
    return (
        table_schema.append(pa.field(SEQ, pa.int64(), nullable=False))
        .append(pa.field(OP, pa.int8(), nullable=False))
        .append(pa.field(UNSET_MASK, pa.int64(), nullable=False))
    )


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


@dataclass(frozen=True)
class Delta:
    """One sorted run of row versions of one table (key ASC, seq DESC) in one Parquet file."""

    id: int
    table_id: int
    part: int  # partition id within the table (see Layout)
    path: str  # relative to the warehouse
    min_seq: int
    max_seq: int
    rows: int
    bytes: int
    partial_rows: int = 0  # versions with unset columns (reads then fill them from older versions)
    deletes: int = 0  # delete versions
    unique_keys: bool = False  # at most one version per key: reads need no merge within it
    schema_version: int = 1  # the table's schema version when written (its physical columns)
    checksum: str | None = None  # SHA-256 of the file, verified by caches (htap.replica.warehouse)
    dv_checksum: str | None = None  # of its deletion-vector sidecar (`<path>.dv`); None: no sidecar
    until_seq: int | None = None  # retired by a repartition at this seq: still read below it

    def files(self) -> dict[str, str | None]:
        """Its files in the warehouse (relative path -> checksum): the delta and its sidecar."""
        out = {self.path: self.checksum}
        if self.dv_checksum is not None:
            out[f"{self.path}.dv"] = self.dv_checksum
        return out
