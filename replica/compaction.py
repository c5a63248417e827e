"""Compaction: keep the number of deltas per partition small, and drop versions nobody can read.

Policy (F1 Lightning, section 4.7): size-tiered with exponentially growing size limits. Starting
from `min_bytes`, the limit grows by `ratio` until two or more deltas of the partition fit under
it; those are merged. A merge of only small deltas is a minor compaction, one that includes
larger ones a major compaction. A partition with more than `max_deltas` deltas merges the
smallest tier whose merge leaves it at most `max_deltas` (all of them only if nothing less
does): checkpoints every half second add more than a dozen small deltas between two passes,
and merging them all rewrote a partition's whole base file on every pass.

A merge that covers every live delta of a partition is also a base compaction: versions at or
below the GC seq (the queryable window's low end, lowered to the oldest live pin) collapse to
one version per key — the newest, with partial columns filled — and deleted or truncated rows
disappear. Reads at any seq inside the window are unchanged by any of this.

Merges write a new delta, then swap it for its inputs in one guarded metadata transaction; the
inputs are retired, and deleted by garbage collection once no live pin can read them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from htap import engine
from htap.conf import HtapConfig
from htap.errors import ConfigError, DamagedReplicaError, HtapError, InternalQueryError, WarehouseError
from htap.observe import COMPACTION_SECONDS, PARTITION_LOCK_HELD_SECONDS
from htap.replica import dv as dvs
from htap.replica import keyindex
from htap.replica.deltas import StagedDelta, delete_delta_files, partition_dir, partition_lock
from htap.replica.health import RECHECK_INTERVAL_S, auto_recheckable, damaged, first_damage, mark_damaged, recheck
from htap.replica.manifest import write_manifest
from htap.replica.merge import evolved, latest_versions_sql, parquet_source, versioned_source
from htap.replica.metadata import Delta, MetadataStore
from htap.replica.models import OP, OP_UPSERT, SEQ, UNSET_MASK, TableInfo
from htap.replica.read_plans import queryable_window
from htap.replica.repartition import ORPHAN_AGE_S, Counted, collect_orphans, repartition_table
from htap.replica.warehouse import Warehouse, as_warehouse, open_warehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Policy:
    min_bytes: int = 4 << 20
    ratio: float = 4.0
    max_deltas: int = 12

    def __post_init__(self) -> None:
        # With a ratio of 1 or less, or a zero start, pick() would never reach a limit that two
        # deltas fit under; with max_deltas 0 it would rewrite a partition's only delta every pass.
        if not (self.ratio > 1 and self.min_bytes >= 1 and self.max_deltas >= 1):
            raise ConfigError(
                f"compaction policy {self} cannot work: it needs compaction_ratio > 1, "
                f"compaction_min_bytes >= 1 and max_deltas >= 1"
            )

    @classmethod
    def from_config(cls, cfg: HtapConfig) -> "Policy":
        return cls(cfg.compaction_min_bytes, cfg.compaction_ratio, cfg.max_deltas)


def pick(deltas: list[Delta], policy: Policy) -> list[Delta] | None:
    """The deltas of one partition to merge next, or None."""
    if len(deltas) < 2:
        return None
    limit = float(policy.min_bytes)
    largest = max(d.bytes for d in deltas)
    while True:
        chosen = [d for d in deltas if d.bytes <= limit]
        if len(chosen) >= 2 and len(deltas) - len(chosen) + 1 <= policy.max_deltas:
            return chosen
        if limit >= largest:
            return None
        limit *= policy.ratio


def gc_seq(store: MetadataStore, table: TableInfo, window_s: float) -> int | None:
    """Versions at or below this seq that are shadowed can go: no read inside the window or
    under a live pin can see them."""
    window = queryable_window(store, table, window_s)
    if window is None:
        return None
    pins = [p.seq for p in store.live_pins(table.id)]
    return min([window.min_seq, *pins])


def merge(
    warehouse: Warehouse | Path,
    store: MetadataStore,
    table: TableInfo,
    part: int,
    inputs: list[Delta],
    gc: int | None,
    kind: str = "major",
    meanwhile: Callable[[], None] | None = None,
) -> Delta | None:
    """Merge `inputs` into one delta and swap it in. `gc` (only when the inputs are every live
    delta of the partition) collapses versions at or below it. Returns the new delta; None if
    nothing was left or the swap lost a race. `meanwhile` runs just before the partition's
    writer lock is taken (tests: a checkpoint that commits while the merge runs)."""
    warehouse = as_warehouse(warehouse)
    started = time.perf_counter()
    with warehouse.local({d.path: d.checksum for d in inputs}) as root:
        data = _merged(root, warehouse, store, table, inputs, gc)
    if data.num_rows == 0:  # everything was garbage: the partition is simply empty now
        if store.replace_deltas(table.id, inputs, []):
            write_manifest(warehouse, store, table.source)
        log.info("%s compaction of %s partition %d: %d deltas -> none", kind, table.qualified_name, part, len(inputs))
        return None
    key = list(table.key)
    mine = {d.id for d in inputs}
    # The output's deletion vectors, restated against the partition's other deltas before the
    # lock (checkpoints of the partition go on meanwhile: htap.replica.dv.Restatement).
    before = store.deltas(table.id, part)
    if mine - {d.id for d in before}:
        return None  # another compaction won the race
    others0 = [d for d in before if d.id not in mine]
    try:
        with warehouse.local({d.path: d.checksum for d in others0}) as root:
            restated = dvs.Restatement.of(data, key, root, [d.path for d in others0])
    except duckdb.Error as e:  # restated under the lock instead (or found unreadable there)
        log.info("%s partition %d: deletion vectors restated under the lock (%s)", table.qualified_name, part,
                 str(e).splitlines()[0])
        restated = None
    staged = StagedDelta(warehouse, table, data, part)  # its rows, written before the lock too
    # A merge of the whole partition: its key index too (one probe of every key of a 1M-row base
    # took 0.2-2 s; htap.replica.keyindex), caught up under the lock with what was added meanwhile.
    key_schema = pa.schema([table.arrow_schema.field(k) for k in key])
    index = keyindex.KeyIndex.of_delta(key_schema, staged.rel, staged.data) if not others0 else None
    try:
        if meanwhile is not None:
            meanwhile()
        waited = time.perf_counter()
        # Under the partition's writer lock (a checkpoint waits): the output's deletion vectors
        # are completed against the partition as it is now, including deltas written since the
        # merge began; then its footer, and the swap.
        with partition_lock(warehouse, table, part):
            locked = time.perf_counter()
            live = store.deltas(table.id, part)
            gone = mine - {d.id for d in live}
            if gone:
                return None  # another compaction won the race
            others = [d for d in live if d.id not in mine]
            added = [d for d in others if d.id not in {o.id for o in others0}]
            newest = max(d.max_seq for d in [*inputs, *others0])
            kept = {o.id for o in others0} <= {d.id for d in others}
            try:
                if restated is not None and kept and all(d.min_seq > newest for d in added):
                    with warehouse.local({d.path: d.checksum for d in added}) as root:
                        paths = [d.path for d in added]
                        new = staged.finish(dv=lambda rel, rows: restated.entries(rel, root, paths))
                else:  # the partition changed otherwise meanwhile: restate it all, now
                    with warehouse.local({d.path: d.checksum for d in others}) as root:
                        paths = [d.path for d in others]
                        new = staged.finish(dv=lambda rel, rows: dvs.rebuild(rows, rel, key, root, paths))
            except duckdb.Error as e:  # another delta unreadable: no deletion vectors (reads merge)
                log.warning("%s partition %d: deletion vectors not rebuilt (%s)", table.qualified_name, part, e)
                new = staged.finish()
            stored = time.perf_counter()
            if not store.replace_deltas(table.id, inputs, [new]):
                delete_delta_files(warehouse, new.path)
                return None
            swapped = time.perf_counter()
            if index is not None:
                with warehouse.local({d.path: d.checksum for d in others}) as root:
                    index.sync(root, [new.path, *(d.path for d in others)])
                keyindex.install(warehouse.lock_dir(partition_dir(table, part)), index)
            else:
                _swap_in_index(warehouse, table, part, live, inputs, others, new.path, data)
            held = time.perf_counter() - locked
            under = (f"storing {stored - locked:.3f} s, metadata swap {swapped - stored:.3f} s,"
                     f" key index swap {time.perf_counter() - swapped:.3f} s")
    finally:
        staged.discard()
    PARTITION_LOCK_HELD_SECONDS.labels(table.source, table.qualified_name).observe(held)
    write_manifest(warehouse, store, table.source)  # before garbage collection may delete the inputs
    log.info(
        "%s compaction of %s partition %d: %d deltas (%d versions) -> 1 (%d versions) in %.3f s,"
        " %.3f s of it holding the partition's lock (%.3f s waiting for it, %d deltas added meanwhile; %s)",
        kind, table.qualified_name, part, len(inputs), sum(d.rows for d in inputs), new.rows,
        time.perf_counter() - started, held, locked - waited, len(added), under,
    )
    return next(d for d in store.deltas(table.id, part) if d.path == new.path)


def _swap_in_index(warehouse: Warehouse, table: TableInfo, part: int, live: list[Delta], inputs: list[Delta],
                   others: list[Delta], added: str, data) -> None:
    """Keep this process's key index of the partition current across the swap (htap.replica.keyindex),
    if it was current before it. In place only where that is exact: a tier merge keeps every
    version of its inputs; a base merge folds some away, which is exact only if every other live
    delta is newer than all its inputs (then no key's newest version can fall back to an older
    delta). Otherwise it is left covering the inputs: the next checkpoint's `sync` catches it up."""
    folder = warehouse.lock_dir(partition_dir(table, part))
    index = keyindex.peek(folder)
    if index is None:
        return
    with index.lock:
        if not (index.built and index.covers == {d.path for d in live}):
            return  # not current: its next use rebuilds or catches it up anyway
        newest_input = max(d.max_seq for d in inputs)
        if data.num_rows != sum(d.rows for d in inputs) and not all(o.min_seq > newest_input for o in others):
            return
        index.replace([d.path for d in inputs], added, data)


def _merged(root: Path, warehouse: Warehouse, store: MetadataStore, table: TableInfo, inputs: list[Delta],
            gc: int | None):
    """The merged versions of `inputs` (local copies under `root`), sorted (key ASC, seq DESC)."""
    files = [str(root / d.path) for d in inputs]
    for d, f in zip(inputs, files):
        if not Path(f).is_file():
            raise damaged(f"{table.source}.{table.qualified_name}", f"delta file {warehouse.url(d.path)} is missing")
    columns = table.arrow_schema.names
    keys = ", ".join(f'"{k}"' for k in table.key)
    versions = [d.schema_version for d in inputs]
    added = {c.name: c.added_version for c in table.columns if c.added_version > 1}
    source = versioned_source(files, versions, added, columns) if evolved(versions, added) else parquet_source(files)
    if gc is None:
        sql = f"SELECT * FROM {source} ORDER BY {keys}, \"{SEQ}\" DESC"
    else:
        floor = store.truncated_at(table.id, gc)
        newer = f'SELECT * FROM {source} WHERE "{SEQ}" > {int(gc)}'
        base = latest_versions_sql(
            source, list(table.key), columns, columns, gc, floor=floor, partial=any(d.partial_rows for d in inputs)
        )
        collapsed = f'SELECT *, 0::BIGINT AS "{UNSET_MASK}" FROM ({base}) WHERE "{OP}" = {OP_UPSERT}'
        sql = f"SELECT * FROM ({newer}) UNION ALL BY NAME ({collapsed}) ORDER BY {keys}, \"{SEQ}\" DESC"
    con = engine.cursor(exact_floats=engine.has_floats(table.arrow_schema))
    try:
        data = con.sql(sql).to_arrow_table()
    except duckdb.Error as e:
        problem = first_damage(files)
        if problem:
            raise damaged(f"{table.source}.{table.qualified_name}", problem) from e
        raise InternalQueryError(f"cannot compact table {table.source}.{table.qualified_name} (intact files): {e}") from e
    finally:
        con.close()
    return data


def compact_table(cfg: HtapConfig, store: MetadataStore, table: TableInfo, policy: Policy) -> int:
    """One compaction pass over a table's partitions; returns the number of merges."""
    merges = 0
    horizon = gc_seq(store, table, cfg.window_s)
    for part in table.layout.ids:
        live = store.deltas(table.id, part)
        chosen = pick(live, policy)
        if chosen is None:
            continue
        covers_all = len(chosen) == len(live)
        kind = "base" if covers_all else ("minor" if all(d.bytes <= policy.min_bytes for d in chosen) else "major")
        with COMPACTION_SECONDS.labels(table.source, table.qualified_name, kind).time():
            merged = merge(open_warehouse(cfg), store, table, part, chosen, horizon if covers_all else None, kind)
        if merged is not None:
            merges += 1
    return merges


def collect_garbage(cfg: HtapConfig, store: MetadataStore) -> int:
    """Delete retired delta files that no live pin can read (nor, for those a repartition
    retired, a read inside the queryable window); returns how many."""
    lows = {}
    for table in store.list_tables(views=True):
        window = queryable_window(store, table, cfg.window_s)
        if window is not None:
            lows[table.id] = window.min_seq
    paths = store.collect_garbage(lows)
    warehouse = open_warehouse(cfg)
    for p in paths:
        delete_delta_files(warehouse, p)
    return len(paths)


def compaction_loop(cfg: HtapConfig, stop: threading.Event) -> None:
    """The service's background compactor and garbage collector (never on the read path)."""
    if cfg.compaction_interval_s <= 0:
        return
    policy = Policy.from_config(cfg)
    store = MetadataStore(cfg.metadata)
    rechecked: dict[int, float] = {}
    counted: Counted = {}
    swept: dict[int, float] = {}  # table id -> when its unreferenced files were last collected
    try:
        while not stop.wait(cfg.compaction_interval_s):
            unsafe = False  # a manifest may still name retired deltas: collect no garbage this pass
            for table in store.list_tables(views=True):  # a view's deltas are compacted as a table's
                if auto_recheckable(table) and store.clock() - rechecked.get(table.id, 0.0) >= RECHECK_INTERVAL_S:
                    rechecked[table.id] = store.clock()
                    try:
                        log.warning("%s: %s", table.qualified_name, recheck(open_warehouse(cfg), store, table).detail)
                    except WarehouseError as e:
                        log.error("re-check of %s failed: %s", table.qualified_name, e)
                if not table.readable:
                    continue
                try:
                    compact_table(cfg, store, table, policy)
                    repartition_table(open_warehouse(cfg), store, table, cfg.partition_rows, counted)
                    if time.monotonic() - swept.get(table.id, -ORPHAN_AGE_S) >= ORPHAN_AGE_S:  # hourly:
                        swept[table.id] = time.monotonic()  # files of writers killed before their commit
                        collect_orphans(open_warehouse(cfg), store, table)
                except DamagedReplicaError as e:
                    log.error("%s: marked unhealthy: %s", table.qualified_name, e)
                    mark_damaged(store, table.id, e)
                except WarehouseError as e:
                    unsafe = True
                    log.error("compaction of %s failed: %s", table.qualified_name, e)
                except HtapError as e:
                    log.error("compaction of %s failed: %s", table.qualified_name, e)
            try:
                if not unsafe:
                    collect_garbage(cfg, store)
            except WarehouseError as e:  # the files stay behind (unreferenced): never read
                log.error("garbage collection failed: %s", e)
    finally:
        store.close()
