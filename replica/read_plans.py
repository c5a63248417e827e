"""Read plans: which seqs of a table are readable (its queryable window), and which deltas a
read at one seq needs. (A query's *snapshot* is the one seq all its scans read at: htap.pushdown.planning
fixes it; this module plans a table's read there.)

The queryable window of a table is [min safe seq, max safe seq]: the max safe seq is the
newest seq all of whose changes are durable; the min safe seq is the seq the source had reached
`window_s` ago (never below the initial copy). Reads inside the window are exact. A read plans
its deltas under a lease (MetadataStore.lease, never fsynced), so compaction and garbage
collection cannot delete a file under it; a lease lives `pin_ttl_s` past its last renewal, and
a Spark query's leases are renewed by its driver while it runs (htap.replica.leases).
"""

from __future__ import annotations

from dataclasses import dataclass

from htap.errors import ReplicaError
from htap.replica.metadata import Delta, MetadataStore
from htap.replica.models import Layout, TableInfo
from htap.replica.partitions import decode_bounds, matching_partitions
from htap.replica.tail import TailRead


class OutsideWindow(ReplicaError):
    """The asked-for seq is not inside the table's queryable window."""


@dataclass(frozen=True)
class Window:
    min_seq: int
    max_seq: int


@dataclass(frozen=True)
class ReadPlan:
    """What one partition read at one seq needs."""

    part: int  # the partition's id (htap.replica.models.Layout)
    seq: int
    delta_paths: tuple[str, ...]
    floor: int | None  # versions below it were truncated away
    partial: bool  # some version lacks columns (partial update): reads must fill them
    strategy: str = "merge"  # "merge", "direct" (one delta, one version per key) or "base" (see below)
    delta_versions: tuple[int, ...] = ()  # schema version each delta was written in
    added_versions: tuple[tuple[str, int], ...] = ()  # columns added after the first schema version
    lease: int | None = None  # the lease (pin id) keeping delta_paths on disk; tasks renew it
    # Every file the read needs (deltas and their deletion-vector sidecars) -> its checksum, which
    # a cache in front of an object store verifies (htap.replica.warehouse).
    files: tuple[tuple[str, str | None], ...] = ()
    # With strategy "base": delta_paths[0] holds one version per key, every other delta is newer
    # than all of it and carries full rows, so a key's newest version in the others wins outright.
    # Whether some delta holds a version outside [floor, seq] (reads must filter `_seq`), and
    # whether some delta holds a delete version (reads must keep upserts only). Neither filter
    # changes a settled partition's rows, but each one costs the reading engine its estimate of
    # the table's size: DuckDB counts any filter as keeping a fifth of the rows, and with every
    # table of a pushed join a fifth of its size it ordered TPC-H Q8's joins badly (the 365,091
    # rows of lineitem JOIN orders built into a hash table to probe with 1,451 parts).
    seq_filter: bool = True
    deletes: bool = True
    # The changes above `seq` up to the query's snapshot, from the service's in-memory tail
    # (htap.replica.tail): read with the deltas as their newest one.
    tail: TailRead | None = None
    # The partition's keys: [low, high) on the first key column in the layout read (None:
    # unbounded). A split task restricts a co-partitioned table to it (htap.pushdown.planning).
    key_range: tuple = (None, None)


def read_strategy(deltas: list[Delta]) -> str:
    """How a partition read can avoid the general per-key merge (see ReadPlan.strategy)."""
    if len(deltas) == 1 and deltas[0].unique_keys and not deltas[0].partial_rows:
        return "direct"
    if len(deltas) > 1:
        base, newer = deltas[0], deltas[1:]
        if base.unique_keys and not any(d.partial_rows for d in deltas) and all(d.min_seq > base.max_seq for d in newer):
            return "base"
    return "merge"


def queryable_window(store: MetadataStore, table: TableInfo, window_s: float, now: float | None = None) -> Window | None:
    if not table.readable:
        return None
    now = store.clock() if now is None else now
    oldest = store.seq_at(table.source, now - window_s)
    low = max(table.copy_seq or 0, oldest or 0)
    return Window(min(low, table.max_safe_seq), table.max_safe_seq)


def seq_for_time(store: MetadataStore, table: TableInfo, at: float) -> int:
    """The newest safe seq the table's source had reached at wall clock `at`."""
    seq = store.seq_at(table.source, at)
    if seq is None:
        raise OutsideWindow(f"{table.qualified_name} has no replica state as old as {at}; the oldest is newer")
    return seq


def plan_reads(
    table: TableInfo, deltas: list[Delta], seq: int, floor: int | None, filters: tuple = (),
    lease: int | None = None, layout: Layout | None = None,
) -> list[ReadPlan]:
    """One read plan per partition of `layout` (the layout at `seq`, `MetadataStore.layout_at`;
    default: the table's current one, right for seqs since the last repartition) that the scan's
    `filters` (htap.rewrite.pushed conjuncts) can match on the first key column, with the deltas
    that can hold a version visible at `seq` (`deltas`: `MetadataStore.deltas_at(seq)`, or the
    live ones for the current layout)."""
    layout = layout or table.layout
    splits = decode_bounds(layout.bounds_b64)
    plans = []
    for index in matching_partitions(splits, table.key[0], filters):
        part = layout.ids[index]
        low = splits[index - 1].as_py() if splits is not None and index > 0 else None
        high = splits[index].as_py() if splits is not None and index < len(splits) else None
        mine = [
            d for d in deltas if d.part == part and d.min_seq <= seq and (floor is None or d.max_seq >= floor)
        ]
        mine.sort(key=lambda d: (d.min_seq, d.id))
        plans.append(
            ReadPlan(
                part=part,
                seq=seq,
                delta_paths=tuple(d.path for d in mine),
                floor=floor,
                partial=any(d.partial_rows for d in mine),
                strategy=read_strategy(mine),
                delta_versions=tuple(d.schema_version for d in mine),
                added_versions=tuple((c.name, c.added_version) for c in table.columns if c.added_version > 1),
                lease=lease,
                files=tuple(item for d in mine for item in d.files().items()),
                seq_filter=any(d.max_seq > seq or (floor is not None and d.min_seq < floor) for d in mine),
                deletes=any(d.deletes for d in mine),
                key_range=(low, high),
            )
        )
    return plans


def pin_and_plan(
    store: MetadataStore,
    table: TableInfo,
    seq: int,
    window_s: float,
    pin_ttl_s: float,
    filters: tuple = (),
    holder: str | None = None,
) -> list[ReadPlan]:
    """Check `seq` is inside the window, lease it (`pin_ttl_s`; a lease of its own for a
    `holder`, see MetadataStore.lease), and plan the partition reads (`filters`: the scan's)."""
    _check_window(store, table, seq, window_s)
    lease, deltas = store.lease(table.id, seq, pin_ttl_s, holder)
    return plan_reads(table, deltas, seq, store.truncated_at(table.id, seq), filters, lease, store.layout_at(table.id, seq))


def plan_unleased(store: MetadataStore, table: TableInfo, seq: int, window_s: float) -> list[ReadPlan]:
    """`pin_and_plan` without a lease, writing nothing (a Spark executor may call it): the live
    deltas at `seq` now. Nothing keeps them from being compacted away while they are read."""
    _check_window(store, table, seq, window_s)
    return plan_reads(table, store.deltas_at(table.id, seq), seq, store.truncated_at(table.id, seq), (), None,
                      store.layout_at(table.id, seq))


def _check_window(store: MetadataStore, table: TableInfo, seq: int, window_s: float) -> None:
    window = queryable_window(store, table, window_s)
    if window is None:
        raise ReplicaError(
            f"HTAP table {table.qualified_name} is not readable (state: {table.state}"
            f"{'; ' + table.error if table.error else ''})"
        )
    if not window.min_seq <= seq <= window.max_seq:
        raise OutsideWindow(
            f"seq {seq} of {table.qualified_name} is outside its queryable window [{window.min_seq}, {window.max_seq}]"
        )
