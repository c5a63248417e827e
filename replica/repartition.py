"""Online repartitioning: partitions that grew split, small neighbours merge, while ingest and
reads go on.

A repartition replaces a run of adjacent partitions of the current layout by new ones (a split:
one partition by several; a merge: two by one). It runs in the compaction thread:

1. In one metadata transaction it reads the table's layout, the live deltas of the partitions
   it replaces and the max safe seq S (every version at or below S is in those deltas; every
   later checkpoint's versions are above S).
2. Without any lock it folds those deltas to the rows live at S (one version per key: the newest,
   partial updates filled, deletes and truncated rows gone — the base compaction's SQL), chooses
   the new split points from them (equal-count, on the first key column) and writes one delta
   per new partition, under new partition ids (ids are never reused).
3. Under the table's layout lock (checkpoints route rows by the layout while holding it, from
   reading it to their commit, htap.replica.deltas.write_partitioned) and the old partitions'
   writer locks, it carries over the deltas checkpoints committed to the old partitions since
   step 1 (re-routed to the new partitions, their deletion vectors computed against the new
   deltas, exactly as a checkpoint does), and commits in ONE metadata transaction: the new
   layout holds from S on, the old partitions' deltas are retired with `until_seq` = S, the new
   deltas appear. A guard (the layout and the old partitions' live deltas unchanged since step
   1) makes a lost race change nothing.

Reads at a seq use the layout of that seq (MetadataStore.layout_at): below S the old
partitions, whose deltas stay on disk while the queryable window or a live lease still reaches
below S (MetadataStore.collect_garbage); from S on the new ones, which hold exactly the rows
live at S plus every later version. The metadata commit is the single switch: a crash before
it leaves only unreferenced files (collected by `collect_orphans`), after it the old files are
ordinary retired deltas.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from htap import engine
from htap.errors import InternalQueryError
from htap.observe import REPARTITION_SECONDS
from htap.replica import dv as dvs
from htap.replica import keyindex
from htap.replica.deltas import (
    delete_delta_files,
    first_versions,
    layout_lock,
    partition_dir,
    partition_lock,
    table_dir,
    write_delta,
    write_partitioned,
)
from htap.replica.health import damaged, first_damage
from htap.replica.merge import evolved, latest_versions_sql, parquet_source, versioned_source
from htap.replica.metadata import Delta, MetadataStore, NewDelta
from htap.replica.models import OP, OP_UPSERT, SEQ, UNSET_MASK, Layout, TableInfo, delta_schema
from htap.replica.partitions import decode_bounds, encode_bounds, split_by_partition
from htap.replica.warehouse import LocalWarehouse, Warehouse, as_warehouse

log = logging.getLogger(__name__)

SPLIT_ABOVE = 1.5  # a partition with more live rows than SPLIT_ABOVE x partition_rows splits ...
# ... into ceil(rows / partition_rows) partitions of equal counts (each at most partition_rows).
MERGE_BELOW = 0.5  # adjacent partitions with at most MERGE_BELOW x partition_rows row versions
# together merge (row versions bound the live rows from above, so no read is needed to decide).
ORPHAN_AGE_S = 3600.0  # an unreferenced file this old is no running writer's (collect_orphans)


@dataclass(frozen=True)
class Change:
    """One repartition to try: replace the adjacent partitions `parts` (ids)."""

    action: str  # "split" or "merge"
    parts: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class Outcome:
    action: str
    old: tuple[int, ...]
    new: tuple[int, ...]
    seq: int
    rows: int  # live rows at `seq` written into the new partitions
    carried: int  # deltas committed during the repartition, carried over
    seconds: float


# Exact live-row counts of partitions that looked big enough to split but were not:
# (table id, partition id) -> (ids of its live deltas then, live rows). Saves re-reading them.
Counted = dict[tuple[int, int], tuple[frozenset, int]]


def changes(store: MetadataStore, table: TableInfo, partition_rows: int, counted: Counted | None = None) -> list[Change]:
    """The repartitions the table's current layout calls for: splits of partitions whose upsert
    versions (an upper bound of their live rows) exceed SPLIT_ABOVE x partition_rows (unless
    counted before, with the same deltas, at or below it), then merges of adjacent pairs whose
    row versions together are at most MERGE_BELOW x partition_rows."""
    stats = store.partition_stats(table.id)
    ids = table.layout.ids
    versions = {p: stats.get(p, (0, 0, 0))[1] for p in ids}
    upserts = {p: stats.get(p, (0, 0, 0))[1] - stats.get(p, (0, 0, 0))[2] for p in ids}
    out, busy = [], set()
    for p in ids:
        if upserts[p] > SPLIT_ABOVE * partition_rows:
            seen = (counted or {}).get((table.id, p))
            if seen is not None and seen[0] == frozenset(d.id for d in store.deltas(table.id, p)):
                continue
            out.append(Change("split", (p,), f"up to {upserts[p]} live rows > {SPLIT_ABOVE} x partition_rows"))
            busy.add(p)
    for a, b in zip(ids, ids[1:]):
        if a in busy or b in busy:
            continue
        if versions[a] + versions[b] <= MERGE_BELOW * partition_rows:
            out.append(Change("merge", (a, b), f"{versions[a]} + {versions[b]} row versions <= {MERGE_BELOW} x partition_rows"))
            busy |= {a, b}
    return out


def repartition_table(warehouse: Warehouse | Path, store: MetadataStore, table: TableInfo, partition_rows: int,
                      counted: Counted | None = None) -> list[Outcome]:
    """Every repartition the table's layout calls for now (see `changes`); returns those done."""
    done = []
    for change in changes(store, table, partition_rows, counted):
        outcome = repartition(warehouse, store, table.id, change, partition_rows, counted)
        if outcome is not None:
            done.append(outcome)
    return done


def repartition(warehouse: Warehouse | Path, store: MetadataStore, table_id: int, change: Change, partition_rows: int,
                counted: Counted | None = None, meanwhile: Callable[[], None] | None = None) -> Outcome | None:
    """Carry out one change (see the module's docstring); None when it is not needed after all
    (a split's exact count is small enough, or one key value fills the partition) or lost a race.
    `meanwhile` runs after the new partitions are written, before the commit's locks are taken
    (tests: a checkpoint whose deltas must be carried over)."""
    started = time.monotonic()
    warehouse = as_warehouse(warehouse)
    with store.transaction():
        table = store.table_by_id(table_id)
        layout = table.layout
        if not table.readable or not _adjacent(layout.ids, change.parts):
            return None
        inputs = [d for d in store.deltas(table_id) if d.part in change.parts]
        seq = table.max_safe_seq
        floor = store.truncated_at(table_id, seq)
    label = f"{table.source}.{table.qualified_name}"
    data = fold(warehouse, table, inputs, seq, floor)
    points = None
    if change.action == "split":
        key = (table_id, change.parts[0])
        if data.num_rows <= SPLIT_ABOVE * partition_rows:
            _remember(counted, key, inputs, data.num_rows)
            return None
        points = split_points(data.column(table.key[0]), math.ceil(data.num_rows / partition_rows))
        if points is None:
            log.warning("%s partition %d: %d live rows but one value of %s: cannot split", label, change.parts[0],
                        data.num_rows, table.key[0])
            _remember(counted, key, inputs, data.num_rows)
            return None
    first = layout.ids.index(change.parts[0])
    last = first + len(change.parts) - 1
    next_id = store.next_partition_id(table_id)
    new_ids = tuple(range(next_id, next_id + _count(points)))
    new = Layout(_new_bounds(decode_bounds(layout.bounds_b64), first, last, points),
                 layout.ids[:first] + new_ids + layout.ids[last + 1:], seq)
    written: list[NewDelta] = []
    committed = False
    try:
        for index, rows in split_by_partition(data, table.key[0], points):
            written.append(write_delta(warehouse, table, rows, new_ids[index], dv=first_versions(table)))
        if meanwhile is not None:
            meanwhile()
        with ExitStack() as locks:
            locks.enter_context(layout_lock(warehouse, table))
            for p in sorted(change.parts):
                locks.enter_context(partition_lock(warehouse, table, p))
            fresh = store.table_by_id(table_id)
            if (fresh.layout.bounds_b64, fresh.layout.ids) != (layout.bounds_b64, layout.ids):
                return None
            live = [d for d in store.deltas(table_id) if d.part in change.parts]
            if not {d.id for d in inputs} <= {d.id for d in live}:
                return None  # a compaction replaced some input meanwhile: try again next pass
            carried = [d for d in live if d.id not in {i.id for i in inputs}]
            for d in carried:
                written += carry(warehouse, fresh, d, points, new_ids, written)
            why = f"{change.action} of {list(change.parts)} at seq {seq}: {change.why}"
            committed = store.commit_layout(table_id, layout, new, live, written, why)
    finally:
        if not committed:
            for d in written:
                delete_delta_files(warehouse, d.path)
    if not committed:
        return None
    for p in change.parts:  # retired: their key indexes are never asked again
        keyindex.forget(warehouse.lock_dir(partition_dir(table, p)))
    seconds = time.monotonic() - started
    REPARTITION_SECONDS.labels(table.source, table.qualified_name, change.action).observe(seconds)
    sizes = [sum(d.rows for d in written if d.part == p and d.max_seq <= seq) for p in new_ids]
    log.info(
        "%s: %s partitions %s -> %s at seq %s (%s; live rows %s), %d deltas committed meanwhile carried over;"
        " %.2f s, %.0f rows/s",
        label, "split" if change.action == "split" else "merged", list(change.parts), list(new_ids), seq, change.why,
        sizes, len(carried), seconds, data.num_rows / max(seconds, 1e-9),
    )
    return Outcome(change.action, change.parts, new_ids, seq, data.num_rows, len(carried), seconds)


def fold(warehouse: Warehouse, table: TableInfo, inputs: list[Delta], seq: int, floor: int | None) -> pa.Table:
    """The rows of `inputs` live at `seq` (one version per key, upserts only, partial updates
    filled), as delta rows sorted by key: the base compaction's collapse."""
    target = delta_schema(table.arrow_schema)
    if not inputs:
        return target.empty_table()
    with warehouse.local({d.path: d.checksum for d in inputs}) as root:
        return _fold(root, warehouse, table, inputs, seq, floor, target)


def _fold(root: Path, warehouse: Warehouse, table: TableInfo, inputs: list[Delta], seq: int, floor: int | None,
          target: pa.Schema) -> pa.Table:
    files = [str(root / d.path) for d in inputs]
    label = f"{table.source}.{table.qualified_name}"
    for d, f in zip(inputs, files):
        if not Path(f).is_file():
            raise damaged(label, f"delta file {warehouse.url(d.path)} is missing")
    columns = table.arrow_schema.names
    keys = ", ".join(f'"{k}"' for k in table.key)
    versions = [d.schema_version for d in inputs]
    added = {c.name: c.added_version for c in table.columns if c.added_version > 1}
    source = versioned_source(files, versions, added, columns) if evolved(versions, added) else parquet_source(files)
    base = latest_versions_sql(source, list(table.key), columns, columns, seq, floor=floor,
                               partial=any(d.partial_rows for d in inputs))
    sql = f'SELECT *, 0::BIGINT AS "{UNSET_MASK}" FROM ({base}) WHERE "{OP}" = {OP_UPSERT} ORDER BY {keys}'
    con = engine.cursor(exact_floats=engine.has_floats(table.arrow_schema))
    try:
        return con.sql(sql).to_arrow_table().select(target.names).cast(target)
    except duckdb.Error as e:
        problem = first_damage(files)
        if problem:
            raise damaged(label, problem) from e
        raise InternalQueryError(f"cannot repartition table {label} (intact files): {e}") from e
    finally:
        con.close()


def split_points(keys: pa.ChunkedArray | pa.Array, parts: int) -> pa.Array | None:
    """Split points on sorted first-key values for `parts` equal-count partitions: values at
    equal row distances, each above the smallest key and above the one before (every row of one
    value stays in one partition). None when no point remains."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    n = len(keys)
    chosen, last = [], keys[0]
    for i in range(1, parts):
        value = keys[min(n - 1, round(i * n / parts))]
        if _above(value, last):
            chosen.append(value)
            last = value
    return pa.array([v.as_py() for v in chosen], keys.type) if chosen else None


def _above(a: pa.Scalar, b: pa.Scalar) -> bool:
    """a > b in the partitions' order (a double NaN above every number)."""
    x, y = a.as_py(), b.as_py()
    if isinstance(x, float) or isinstance(y, float):
        xn, yn = x != x, y != y
        if xn or yn:
            return xn and not yn
    return x > y


def carry(warehouse: Warehouse, table: TableInfo, delta: Delta, points: pa.Array | None, new_ids: tuple[int, ...],
          written: list[NewDelta]) -> list[NewDelta]:
    """Write the versions of `delta` (committed to an old partition after the repartition read
    its inputs) into the new partitions, as a checkpoint would: deletion-vector entries against
    what is already written there, partial updates completed from it."""
    with warehouse.local({delta.path: delta.checksum}) as root:
        rows = _versions(root, table, delta)
    routed = dataclasses.replace(table, partition_bounds_b64=encode_bounds(points) if points is not None else None,
                                 partition_ids=new_ids)

    def live(part: int) -> dict[str, str | None]:
        return {d.path: d.checksum for d in written if d.part == part}

    return write_partitioned(warehouse, routed, rows, live)


def _versions(root: Path, table: TableInfo, delta: Delta) -> pa.Table:
    """Every version in one delta, in the table's current logical schema, sorted (key, seq DESC)."""
    files = [str(root / delta.path)]
    columns = table.arrow_schema.names
    added = {c.name: c.added_version for c in table.columns if c.added_version > 1}
    versions = [delta.schema_version]
    source = versioned_source(files, versions, added, columns) if evolved(versions, added) else parquet_source(files)
    keys = ", ".join(f'"{k}"' for k in table.key)
    con = engine.cursor(exact_floats=engine.has_floats(table.arrow_schema))
    try:
        return con.sql(f'SELECT * FROM {source} ORDER BY {keys}, "{SEQ}" DESC').to_arrow_table()
    finally:
        con.close()


def collect_orphans(warehouse: Warehouse | Path, store: MetadataStore, table: TableInfo,
                    older_than_s: float = ORPHAN_AGE_S) -> int:
    """Delete files in the table's folder that no delta of the metadata references (live or
    retired) and that are older than `older_than_s` — what a writer killed between writing a
    delta and committing it left behind (a younger file may be a running writer's). Returns
    how many files went. Local warehouses only (an object store's files carry no age here)."""
    warehouse = as_warehouse(warehouse)
    if not isinstance(warehouse, LocalWarehouse):
        return 0
    root = warehouse.root / table_dir(table)
    if not root.is_dir():
        return 0
    known = set(store.delta_paths(table.id))
    cutoff = time.time() - older_than_s
    gone = 0
    for folder in root.iterdir():
        if not folder.is_dir():
            continue
        for f in folder.iterdir():
            name = f.name
            if name.startswith("."):
                continue  # lock files
            rel = f"{table_dir(table)}/{folder.name}/{name}"
            if rel.endswith(dvs.SUFFIX):
                rel = rel[: -len(dvs.SUFFIX)]
            if rel in known:  # (a staged file, `<rel>.<hex>.tmp`, never is)
                continue
            try:
                if f.stat().st_mtime < cutoff:
                    os.unlink(f)
                    gone += 1
            except FileNotFoundError:
                continue
    if gone:
        log.info("%s: %d unreferenced files of interrupted writers deleted", table.qualified_name, gone)
    return gone


def _adjacent(ids: tuple[int, ...], parts: tuple[int, ...]) -> bool:
    if not parts or parts[0] not in ids:
        return False
    first = ids.index(parts[0])
    return ids[first:first + len(parts)] == parts


def _count(points: pa.Array | None) -> int:
    return 1 if points is None else len(points) + 1


def _new_bounds(splits: pa.Array | None, first: int, last: int, points: pa.Array | None) -> str | None:
    """The split points with those between partitions first..last replaced by `points`."""
    pieces = []
    if splits is not None:
        pieces.append(splits.slice(0, first))
    if points is not None:
        pieces.append(points.cast(splits.type) if splits is not None else points)
    if splits is not None:
        pieces.append(splits.slice(last))
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return None
    return encode_bounds(pa.concat_arrays(pieces))


def _remember(counted: Counted | None, key: tuple[int, int], inputs: list[Delta], rows: int) -> None:
    if counted is not None:
        counted[key] = (frozenset(d.id for d in inputs), rows)
