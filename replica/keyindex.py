"""The key -> (delta, row) index of a partition: where each key's newest version is among the
partition's live deltas.

Why: a checkpoint's deletion-vector entries name, for every key it writes, that key's newest
version in the partition's older live deltas (htap.replica.dv), and a partial update (unchanged
TOAST) is completed from that same version. Finding them by scanning the key columns of every
live delta (a 1M-row base file included) took most of each checkpoint (every ~0.5 s under load);
with the index a checkpoint costs a lookup per key it writes.

What it holds: per key, the (delta, row, seq) of its newest version among the deltas it `covers`
(relative paths). It lives in the memory of the writing process and, as a cache, on local disk
(htap.replica.keyindex_file): at first use a process reads the stored one, checked through and
through, else builds it from the deltas themselves. It is never trusted beyond what it covers:
every use first compares `covers` with the partition's live deltas as the metadata lists them
now (`sync`). Deltas only added since (checkpoints of another process or after the stored copy
was written, a checkpoint whose delta carried no deletion vectors): it reads just those; any
delta gone that it was not told about (a compaction or repartition of another process or since
the stored copy was written, a checkpoint that wrote a delta and then failed before its
commit): its entries go, and the keys they were for are looked up again in the live deltas
(`_catch_up`), so it ends exactly as a rebuild would, at the cost of reading the added deltas
and finding the orphaned keys (a semi-join on the key columns) instead of indexing every live
version. Delta paths are never reused and
deltas are immutable, so equal path sets mean equal contents: the index cannot be stale. A
compaction in this process updates it in place (`replace`), under the partition's writer lock,
when it was current.

Stored copies are written off the hot path: the service's `persist_in_background` thread writes
an index changed since its last write (at once if it was rebuilt at its first use, as none
stored was usable; else at most every PERSIST_EVERY_S), and `flush` at a clean stop writes
every changed one, so a restart reads them all. Nothing waits for these
writes and nothing is confirmed on their strength: the durable truth stays the deltas and the
metadata, and a crash costs at worst the rebuild it always did.

Lookups are vectorized: keys hash to uint64 (DuckDB's `hash` over every key column, so composite
and string keys work) kept sorted; numpy's searchsorted finds the candidates and the keys
themselves are compared, so a hash collision costs a second probe, never a wrong answer.

Entries stay for deleted keys (a delete is a key's newest version too, and is superseded by a
re-insert like any version); they leave when a base compaction folds the delete away.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from htap import engine
from htap.observe import KEY_INDEX_OPENS, phase
from htap.replica import keyindex_file
from htap.replica.models import SEQ

log = logging.getLogger(__name__)

KEEP = 8_000_000  # entries (keys) one process keeps, ~40 bytes each plus the keys; the least
# recently used partitions' indexes beyond go (their next use rebuilds them)
_MAX_CHUNKS = 64  # key chunks (one per write) before they are combined
# An index that keeps changing is stored at most this often (htap.replica.keyindex_file): a 1M-key
# one is ~44 MB and ~0.5 s of the service's CPU to store, and under steady writes compactions make
# a stored copy stale within seconds anyway; a clean stop stores every changed one.
PERSIST_EVERY_S = 300.0


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _numpy_hashed(schema: pa.Schema) -> bool:
    return len(schema) == 1 and pa.types.is_integer(schema.field(0).type)


def hash_scheme(schema: pa.Schema) -> str:
    """How `hashes` hashes keys of `schema`: a stored index hashed otherwise is never used."""
    return "splitmix64" if _numpy_hashed(schema) else f"duckdb {duckdb.__version__}"


def hashes(keys: pa.Table) -> np.ndarray:
    """uint64 hashes of the rows of `keys` (every column), in row order. A single integer column
    (the usual key) is mixed in numpy (splitmix64's finalizer); other keys take DuckDB's `hash`
    (registering a table with DuckDB costs ~2 ms, a fifth of a busy checkpoint's index work).
    An index only ever compares hashes made by this one function in this process."""
    if keys.num_rows == 0:
        return np.empty(0, np.uint64)
    if _numpy_hashed(keys.schema) and keys.column(0).null_count == 0:
        x = keys.column(0).to_numpy().astype(np.int64).view(np.uint64)  # (copies: to_numpy may be read-only)
        x = x ^ (x >> np.uint64(30))
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
    con = engine.cursor()
    try:
        con.register("__keys", keys)
        cols = ", ".join(_q(c) for c in keys.column_names)
        h = con.sql(f"SELECT hash({cols}) AS h FROM __keys").fetchnumpy()["h"]
    finally:
        con.close()
    return np.asarray(h, dtype=np.uint64)


def _searchsorted(stored: np.ndarray, h: np.ndarray) -> np.ndarray:
    """np.searchsorted(stored, h), probing in sorted order: many times faster on large batches
    (each probe starts where the last one ended, in cache)."""
    if len(h) < 1024:
        return np.searchsorted(stored, h)
    order = np.argsort(h)
    out = np.empty(len(h), np.int64)
    out[order] = np.searchsorted(stored, h[order])
    return out


def _equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Row-wise key equality (NaN equals NaN, as in the merge's grouping)."""
    same = np.ones(a.num_rows, dtype=bool)
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        eq = pc.fill_null(pc.equal(x, y), False)
        if pa.types.is_floating(x.type):
            eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False))
        same &= np.asarray(eq.to_numpy(zero_copy_only=False), dtype=bool)
    return same


def same_as_previous(data: pa.Table, columns: list[str]) -> np.ndarray:
    """For rows 1..n-1 of `data`: whether the row equals the one before it in `columns` (NaN
    equals NaN, as in the merge's grouping)."""
    n = data.num_rows
    if n < 2:
        return np.zeros(0, dtype=bool)
    cols = data.select(columns)
    return _equal(cols.slice(1), cols.slice(0, n - 1))


def newest_per_key(data: pa.Table, key: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For a key-sorted (key ASC, seq DESC) table: the row of each key's first (newest) and last
    (oldest) version."""
    n = data.num_rows
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    same = same_as_previous(data, key)
    starts = np.concatenate([[0], np.flatnonzero(~same) + 1]).astype(np.int64)
    ends = np.concatenate([starts[1:] - 1, [n - 1]]).astype(np.int64)
    return starts, ends


class KeyIndex:
    """One partition's index (see the module docstring). Use under `lock`."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema  # the key columns
        self.lock = threading.Lock()
        self.folder: Path | None = None  # the partition's lock folder, where it is stored (set by `of`, `install`)
        self.opened: str | None = None  # how `of` found it (loaded, damaged, missing): told at the first `sync`
        self.dirty = False  # changed since it was stored
        self.written: float | None = None  # time.monotonic() when it was last stored or read
        self.retired = False  # `forget` dropped it: never stored again
        self._reset()

    def _reset(self) -> None:
        self.built = False
        self.covers: frozenset[str] = frozenset()
        self.paths: list[str] = []  # delta of each target code
        self._codes: dict[str, int] = {}
        self.keys = self.schema.empty_table()  # entry i's key (append-only, chunked)
        self.target = np.empty(0, np.int32)
        self.row = np.empty(0, np.int64)
        self.seq = np.empty(0, np.int64)
        self.h = np.empty(0, np.uint64)  # sorted hashes ...
        self.order = np.empty(0, np.int64)  # ... and the entry each belongs to

    def __len__(self) -> int:
        return len(self.seq)

    @classmethod
    def of_delta(cls, schema: pa.Schema, rel: str, data: pa.Table) -> "KeyIndex":
        """An index covering only the key-sorted delta `data`, stored (or about to be) at `rel`:
        a compaction builds its output's before it takes the partition's lock, and `sync`s it
        with the deltas committed meanwhile under it (htap.replica.compaction)."""
        index = cls(schema)
        first, _ = newest_per_key(data, schema.names)
        index._put(data.select(schema.names).take(pa.array(first)).cast(schema), index._code(rel), first,
                   data.column(SEQ).to_numpy()[first])
        index.covers, index.built = frozenset([rel]), True
        return index

    # --- keeping it current ----------------------------------------------------------------------

    def missing(self, live: list[str]) -> list[str]:
        """The deltas `sync(live)` may read: none when current, the added ones when deltas were
        only added, else all of `live` (the added ones, and the others for the keys whose
        entries were in the deltas gone)."""
        now = frozenset(live)
        if self.built and self.covers <= now:
            return sorted(now - self.covers)
        return list(live)

    def sync(self, root: Path, live: list[str]) -> None:
        """Make the index cover exactly `live` (relative paths under `root`): read the deltas
        added since it was current, and catch up with the ones gone (`_catch_up`)."""
        now = frozenset(live)
        opened, self.opened = self.opened, None
        if self.built and self.covers == now:
            self._tell(opened, 0, False, 0.0)
            return
        started = time.perf_counter()
        stale = self.built and not self.covers <= now
        gone = self.covers - now if stale else frozenset()
        self.covers = self.covers - gone
        need = self.missing(live)
        for rel in need:
            self._add_file(root, rel)
        if gone:
            self._catch_up(root, gone, sorted(now))
        self.covers, self.built = now, True
        self._touch()
        self._tell(opened, len(need), stale, time.perf_counter() - started)

    def _catch_up(self, root: Path, gone: frozenset[str], live: list[str]) -> None:
        """After the deltas added since were read: forget the deltas `gone` (compacted away, or
        written by a checkpoint that never committed). An entry the added deltas did not replace
        with a version at least as new still points into them: it goes, and its key is looked up
        again in the live deltas. Whatever removed them, the index then ends as a rebuild would:
        an entry in a live delta is the newest of a superset of the live versions. (A compaction's
        output holds its inputs' newest versions, so after one only the keys of folded deletes
        and of an uncommitted delta are looked up.)"""
        codes = np.array([self._codes[r] for r in gone if r in self._codes], dtype=np.int32)
        orphaned = np.isin(self.target, codes)
        if orphaned.any():
            orphans = self.keys.filter(pa.array(orphaned))
            self._keep(~orphaned)
            self._look_up(root, live, orphans)

    def _look_up(self, root: Path, deltas: list[str], orphans: pa.Table) -> None:
        """Record the newest version of each of `orphans` (keys the index has no entry for) in
        `deltas`."""
        names = ", ".join(_q(c) for c in self.schema.names)
        con = engine.cursor()
        try:
            con.register("__htap_orphans", orphans)
            for rel in deltas:
                path = str(root / rel).replace("'", "''")
                data = con.sql(
                    f"SELECT {names}, {_q(SEQ)}, file_row_number AS __row FROM read_parquet('{path}',"
                    f" file_row_number = true) SEMI JOIN __htap_orphans USING ({names})"
                    f" ORDER BY {names}, {_q(SEQ)} DESC"
                ).to_arrow_table()
                if data.num_rows:
                    first, _ = newest_per_key(data, self.schema.names)
                    self._put(data.select(self.schema.names).take(pa.array(first)).cast(self.schema),
                              self._code(rel), data.column("__row").to_numpy()[first],
                              data.column(SEQ).to_numpy()[first])
        finally:
            con.close()

    def _keep(self, keep: np.ndarray) -> None:
        """Keep only the entries where `keep` is set (a boolean per entry)."""
        if keep.all():
            return
        new_id = np.cumsum(keep) - 1
        kept_pairs = keep[self.order]
        self.h, self.order = self.h[kept_pairs], new_id[self.order[kept_pairs]]
        self.keys = self.keys.filter(pa.array(keep))
        self.target, self.row, self.seq = self.target[keep], self.row[keep], self.seq[keep]

    def _tell(self, opened: str | None, read: int, stale: bool, seconds: float) -> None:
        """Say how a process's first use of the partition's index went (after `of`)."""
        if opened is None or (opened == "missing" and not read):
            return
        if opened == "loaded" and not stale:
            KEY_INDEX_OPENS.labels("loaded").inc()
            log.info("key index of %s: the stored one used (%d keys; %d deltas added since it was written, read in"
                     " %.3f s)", self.folder, len(self), read, seconds)
            return
        if opened == "loaded":  # and stale
            KEY_INDEX_OPENS.labels("stale").inc()
            log.info("key index of %s: the stored one caught up in %.3f s (%d keys): it covered deltas no longer live"
                     " (compacted, or of a checkpoint that never committed), whose keys were looked up again; %d"
                     " deltas added since were read", self.folder, seconds, len(self), read)
            return
        KEY_INDEX_OPENS.labels(opened).inc()
        why = {"damaged": "the stored one is damaged", "missing": "none stored"}[opened]
        log.log(logging.INFO if opened == "missing" else logging.WARNING,
                "key index of %s: rebuilt from %d deltas in %.3f s (%s)", self.folder, read, seconds, why)

    def _add_file(self, root: Path, rel: str) -> None:
        con = engine.cursor()
        try:
            path = str(root / rel).replace("'", "''")
            cols = ", ".join(_q(c) for c in [*self.schema.names, SEQ])
            data = con.sql(f"SELECT {cols} FROM read_parquet('{path}')").to_arrow_table()
        finally:
            con.close()
        first, _ = newest_per_key(data, self.schema.names)
        self._put(data.select(self.schema.names).take(pa.array(first)).cast(self.schema), self._code(rel), first,
                  data.column(SEQ).to_numpy()[first])

    def replace(self, removed: list[str], added: str, data: pa.Table) -> None:
        """A compaction swapped the deltas `removed` for `added` (holding `data`, key-sorted),
        which holds every version of them it did not fold away: the entries in `removed` go, and
        `data`'s newest versions come in (a key keeps its entry in another delta if that one is
        newer). Exact for the merges htap.replica.compaction makes: a tier merge keeps every
        version, and a base merge's inputs were every delta older than the partition's others."""
        gone = np.array([self._codes[r] for r in removed if r in self._codes], dtype=np.int32)
        first, _ = newest_per_key(data, self.schema.names)
        keys = data.select(self.schema.names).take(pa.array(first)).cast(self.schema)
        seqs = data.column(SEQ).to_numpy()[first]
        h = hashes(keys)
        keep = ~np.isin(self.target, gone)
        at = self.find(keys, h)
        if (at >= 0).all():
            # A tier merge: every entry in `removed` is the newest version of one of `data`'s
            # keys, which `data` holds as that key's newest: re-point those entries in place
            # (no filtering of every entry of a 1M-key partition: 0.1 s idle, 0.5 s under load).
            mine = np.isin(self.target[at], gone)
            if mine.sum() == (~keep).sum() and (self.seq[at[mine]] == seqs[mine]).all():
                self.target[at[mine]] = self._code(added)
                self.row[at[mine]] = first[mine]
                self.covers = (self.covers - set(removed)) | {added}
                self._touch()
                return
        self._keep(keep)
        self._put(keys, self._code(added), first, seqs, h)
        self.covers = (self.covers - set(removed)) | {added}
        self._touch()

    # --- lookups -------------------------------------------------------------------------------

    def find(self, keys: pa.Table, h: np.ndarray | None = None) -> np.ndarray:
        """The entry of each row of `keys` (unique keys), -1 where the index has none."""
        h = hashes(keys) if h is None else h
        out = np.full(len(h), -1, np.int64)
        if not len(self.h) or not len(h):
            return out
        left = _searchsorted(self.h, h)
        stored, n = self.keys, len(self.h)
        for j in range(n):  # one pass per stored key of the same hash: almost always one
            at = left + j
            probe = np.flatnonzero(out < 0)
            probe = probe[at[probe] < n]
            probe = probe[self.h[at[probe]] == h[probe]]
            if not len(probe):
                break
            entry = self.order[at[probe]]
            same = _equal(stored.take(pa.array(entry)), keys.take(pa.array(probe)))
            out[probe[same]] = entry[same]
        return out

    def where(self, keys: pa.Table) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """For unique `keys`: which of them have a version in the covered deltas (a boolean
        mask), and for those the delta (relative path) and row of the newest one."""
        at = self.find(keys)
        hit = at >= 0
        codes = self.target[at[hit]]
        return pa.array(self.paths, pa.string()).take(pa.array(codes)), self.row[at[hit]], hit

    def supersede(self, data: pa.Table, rel: str) -> tuple[pa.Table, np.ndarray]:
        """For a key-sorted delta about to be written at `rel`: (the unique keys whose newest
        covered version it supersedes, as a table with `target`, `row` and `seq` — the key's
        oldest seq in `data`), then record its newest versions, so the index covers `rel` too."""
        first, last = newest_per_key(data, self.schema.names)
        keys = data.select(self.schema.names).take(pa.array(first)).cast(self.schema)
        h = hashes(keys)
        at = self.find(keys, h)
        hit = at >= 0
        seqs = data.column(SEQ).to_numpy()
        found = pa.table({
            "target": pa.array(self.paths, pa.string()).take(pa.array(self.target[at[hit]])),
            "row": pa.array(self.row[at[hit]], pa.int64()),
            "seq": pa.array(seqs[last[hit]], pa.int64()),
        })
        self._put(keys, self._code(rel), first, seqs[first], h, at)
        self.covers = self.covers | {rel}
        self._touch()
        return found, hit

    # --- on local disk -------------------------------------------------------------------------

    @classmethod
    def stored(cls, schema: pa.Schema, folder: Path) -> "KeyIndex":
        """The partition's index as stored in `folder` if it is intact (htap.replica.keyindex_file),
        else an empty one (built from the deltas at its first `sync`); `opened` says which."""
        index = cls(schema)
        index.folder = folder
        found = keyindex_file.read(folder, schema, hash_scheme(schema), hashes)
        if found is None:
            index.opened = "missing"
        elif isinstance(found, str):
            index.opened = "damaged"
            log.warning("key index of %s: the stored file %s is damaged (%s): rebuilding it from the deltas", folder,
                        keyindex_file.path_of(folder), found)
        else:
            index.keys, index.target, index.row, index.seq = found.keys, found.target, found.row, found.seq
            index.h, index.order, index.paths = found.h, found.order, list(found.paths)
            index._codes = {p: i for i, p in enumerate(index.paths)}
            index.covers, index.built = found.covers, True
            index.opened, index.written = "loaded", time.monotonic()
        return index

    def snapshot(self) -> keyindex_file.Stored | None:
        """Its state to be stored (None if there is nothing to store), no longer `dirty`. Only
        the arrays changed in place are copied (the others are replaced, never written to)."""
        with self.lock:
            self.dirty = False
            if not self.built or self.retired or self.folder is None:
                return None
            self.written = time.monotonic()
            return keyindex_file.Stored(self.keys, self.target.copy(), self.row.copy(), self.seq.copy(), self.h,
                                        self.order, tuple(self.paths), self.covers, str(self.folder),
                                        hash_scheme(self.schema))

    def _touch(self) -> None:
        """Changed: to be stored again (`flush`)."""
        self.dirty = True
        if self.folder is not None and not self.retired:
            with _registry:
                _dirty[str(self.folder)] = self

    # --- internals -----------------------------------------------------------------------------

    def _code(self, rel: str) -> int:
        code = self._codes.get(rel)
        if code is None:
            code = self._codes[rel] = len(self.paths)
            self.paths.append(rel)
        return code

    def _put(self, keys: pa.Table, code: int, rows: np.ndarray, seqs: np.ndarray,
             h: np.ndarray | None = None, at: np.ndarray | None = None) -> None:
        """Record (code, row, seq) as the newest version of each of the unique `keys` unless the
        index has a newer one."""
        h = hashes(keys) if h is None else h
        at = self.find(keys, h) if at is None else at
        hit = at >= 0
        e = at[hit]
        newer = seqs[hit] >= self.seq[e]
        e = e[newer]
        self.target[e] = code
        self.row[e] = rows[hit][newer]
        self.seq[e] = seqs[hit][newer]
        new = np.flatnonzero(~hit)
        if not len(new):
            return
        start = len(self.seq)
        self.keys = pa.concat_tables([self.keys, keys.take(pa.array(new))])
        if self.keys.column(0).num_chunks > _MAX_CHUNKS:
            self.keys = self.keys.combine_chunks()
        self.target = np.concatenate([self.target, np.full(len(new), code, np.int32)])
        self.row = np.concatenate([self.row, rows[new].astype(np.int64)])
        self.seq = np.concatenate([self.seq, seqs[new].astype(np.int64)])
        nh = h[new]
        sort = np.argsort(nh, kind="stable")
        nh, ids = nh[sort], (start + sort).astype(np.int64)
        if not len(self.h):
            self.h, self.order = nh, ids
        else:
            pos = np.searchsorted(self.h, nh)  # nh is sorted
            self.h, self.order = np.insert(self.h, pos, nh), np.insert(self.order, pos, ids)


_indexes: "OrderedDict[str, KeyIndex]" = OrderedDict()
_dirty: dict[str, KeyIndex] = {}  # changed since stored, by folder (evicted ones too, until stored)
_registry = threading.Lock()
_writing = threading.Lock()  # one `flush` at a time


def of(folder: Path, schema: pa.Schema) -> KeyIndex:
    """The index of the partition whose lock folder is `folder` (htap.replica.deltas.partition_lock)
    for key columns `schema`; if this process has none, the stored one (`KeyIndex.stored`:
    empty, built at first sync, if none is stored intact)."""
    name = str(folder)
    with _registry:
        index = _indexes.get(name)
        if index is not None and index.schema == schema:
            _indexes.move_to_end(name)
            return index
    with phase("index_load"):
        index = KeyIndex.stored(schema, folder)
    with _registry:
        there = _indexes.get(name)
        if there is not None and there.schema == schema:
            index = there  # (another thread was first)
        else:
            _indexes[name] = index
        _indexes.move_to_end(name)
        _evict()
        return index


def _evict() -> None:
    """Forget the least recently used partitions' indexes past KEEP entries (under _registry)."""
    total = sum(len(i) for i in _indexes.values())
    while total > KEEP and len(_indexes) > 1:
        total -= len(_indexes.popitem(last=False)[1])


def install(folder: Path, index: KeyIndex) -> None:
    """Make `index` the partition's (under its writer lock, or before anything else writes the
    partition: no checkpoint is using the old one); it is stored at the next `flush`."""
    index.folder = folder
    folder.mkdir(parents=True, exist_ok=True)  # (an object store's lock folder: made by the first lock)
    with _registry:
        old = _indexes.get(str(folder))
        _indexes[str(folder)] = index
        _indexes.move_to_end(str(folder))
        _evict()
    # As often as the one it replaces; a copy's first at PERSIST_EVERY_S (writing a 1M-key index
    # at once slowed the first checkpoints of the stream; a clean stop stores it anyway).
    index.written = old.written if old is not None and old.written is not None else time.monotonic()
    index._touch()


def peek(folder: Path) -> KeyIndex | None:
    """The partition's index if this process has one (no new one is made)."""
    with _registry:
        return _indexes.get(str(folder))


def forget(folder: Path | None = None) -> None:
    """Drop one partition's index (a repartition retired it; a compaction could not keep it
    current) and its stored copy; or every index this process holds, stored or not (tests: a
    crash), leaving the stored copies."""
    with _registry:
        if folder is None:
            _indexes.clear()
            _dirty.clear()
            return
        gone = [i for i in (_indexes.pop(str(folder), None), _dirty.pop(str(folder), None)) if i is not None]
    for index in gone:
        index.retired = True
    keyindex_file.remove(folder)


def flush(min_age_s: float = 0.0) -> int:
    """Store the indexes changed since they were stored or read (htap.replica.keyindex_file):
    those never stored, and those last stored at least `min_age_s` ago. Returns how many were
    written. A failed write is logged and retried at the next flush; nothing depends on it."""
    with _writing:
        now = time.monotonic()
        with _registry:
            due = [(name, i) for name, i in _dirty.items() if i.written is None or now - i.written >= min_age_s]
        done = 0
        for name, index in due:
            stored = index.snapshot()
            with _registry:
                if _dirty.get(name) is index and not index.dirty:
                    del _dirty[name]
            if stored is None:
                continue
            started = time.perf_counter()
            try:
                size = keyindex_file.write(Path(stored.folder), stored)
            except FileNotFoundError:
                continue  # the partition's folder is gone (its table was removed): so is the index
            except OSError as e:
                log.warning("key index of %s not stored (%s): it is rebuilt from the deltas if it is needed before"
                            " the next try", stored.folder, e)
                index._touch()  # (retried once `min_age_s` has passed again)
                continue
            if index.retired:  # `forget` ran meanwhile: its stored copy goes too
                keyindex_file.remove(Path(stored.folder))
                continue
            done += 1
            log.debug("key index of %s stored: %d keys, %d bytes in %.3f s", stored.folder, stored.keys.num_rows,
                      size, time.perf_counter() - started)
        return done


def persist_in_background(stop: threading.Event, every_s: float = PERSIST_EVERY_S) -> threading.Thread:
    """The service's writer of stored indexes (`flush` every second for those due), until `stop`;
    the caller flushes once more when everything else has stopped."""
    def run() -> None:
        while not stop.wait(1.0):
            try:
                flush(every_s)
            except Exception:  # a bug: say so, keep the service (nothing depends on these writes)
                log.exception("storing key indexes failed")

    thread = threading.Thread(target=run, name="key-index-writer", daemon=True)
    thread.start()
    return thread
