"""Deletion vectors: reads of a partition as filtered scans of its deltas, with no per-key merge.

When a delta is written, every row version it supersedes is recorded — in older deltas (the
key's newest live version before this delta) and inside the delta itself (a key changed by
several transactions of one checkpoint) — as an entry (target delta, row ordinal, seq): "row
`row` of `target` has a newer version at `seq`". The entries live in an immutable sidecar file
next to the delta (`<delta>.dv`), stored durably before the metadata transaction that
makes the delta visible, and the delta's own Parquet footer records how many there are
(`htap.dv`), so a missing or damaged sidecar is detected and never trusted: the read then falls
back to the per-key merge, which needs no sidecar at all.

A read at seq S keeps a row iff `floor <= _seq <= S`, it is an upsert, and no entry for it has
`seq <= S`: exactly the newest version at or below S, so time travel inside the window stays
exact. Entries that name retired deltas are ignored; an entry whose superseding version was
folded away by a base compaction is still right for every readable seq (the fold happened at or
below the window's low end).

The key -> (delta, row) lookup a checkpoint needs (each key's newest version in the partition's
older live deltas) is answered by the partition's key index (htap.replica.keyindex), kept in the
writing process's memory and rebuilt from the deltas whenever it does not cover exactly the live
deltas, so it needs no crash recovery of its own. `superseded` answers the same question by
scanning the deltas' key columns (a join on the new keys with DuckDB): the index's reference in
tests. Compaction recomputes the entries of the keys its output holds (`rebuild`), mostly before
it takes the partition's lock (`Restatement`).
Checkpoints and compactions of one partition serialize on a file lock, so a compaction never
misses what a concurrent checkpoint superseded.

Every function here reads local files: `root` is a folder in which `<root>/<relative path>` is
each file (htap.replica.warehouse.Warehouse.local), and entries name deltas by relative path.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from htap import engine
from htap.replica import keyindex
from htap.replica.models import OP, SEQ, UNSET_MASK

log = logging.getLogger(__name__)

FOOTER_KEY = b"htap.dv"  # entries in the delta's sidecar (absent: written without deletion vectors)
SUFFIX = ".dv"
ENTRIES = pa.schema([("target", pa.string()), ("row", pa.int64()), ("seq", pa.int64())])


def sidecar(path: str | Path) -> str:
    return f"{path}{SUFFIX}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _files_sql(files: list[str]) -> str:
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"read_parquet([{listed}], filename = true, file_row_number = true)"


def within(data: pa.Table, key: list[str], rel: str) -> pa.Table:
    """Entries of versions superseded inside one key-sorted (key ASC, seq DESC) table."""
    if data.num_rows < 2:
        return ENTRIES.empty_table()
    rows = np.flatnonzero(keyindex.same_as_previous(data, key)) + 1
    seqs = data.column(SEQ).to_numpy()[rows - 1]
    return pa.table({"target": _repeat(rel, len(rows)), "row": pa.array(rows, pa.int64()),
                     "seq": pa.array(seqs, pa.int64())}, schema=ENTRIES)


def _repeat(text: str, n: int) -> pa.Array:
    return pa.array([text], pa.string()).take(pa.array(np.zeros(n, dtype=np.int64)))


def superseded(data: pa.Table, key: list[str], root: Path, live: list[str]) -> pa.Table:
    """Entries for the newest version, in the `live` deltas (relative paths), of every key of
    `data`, superseded at the oldest seq `data` has for the key. A scan of every live delta:
    checkpoints ask the key index instead (htap.replica.keyindex), which must answer the same."""
    if not live or data.num_rows == 0:
        return ENTRIES.empty_table()
    keys = ", ".join(_q(k) for k in key)
    con = engine.cursor()
    try:
        con.register("batch", data.select(list(key) + [SEQ]))
        prefix = str(root) + os.sep
        rows = con.sql(
            f"WITH b AS (SELECT {keys}, min({_q(SEQ)}) AS s FROM batch GROUP BY {keys}), "
            f"o AS (SELECT {keys}, {_q(SEQ)}, filename, file_row_number FROM {_files_sql([prefix + p for p in live])}) "
            f"SELECT arg_max(struct_pack(f := o.filename, r := o.file_row_number), o.{_q(SEQ)}) AS t, min(b.s) AS s "
            f"FROM o JOIN b USING ({keys}) GROUP BY {', '.join('o.' + _q(k) for k in key)}"
        ).to_arrow_table()
    finally:
        con.close()
    t = rows.column("t").combine_chunks() if rows.num_rows else pa.array([], pa.struct([("f", pa.string()), ("r", pa.int64())]))
    target = pc.utf8_slice_codeunits(t.field("f"), len(prefix)) if rows.num_rows else pa.array([], pa.string())
    return pa.table({"target": target, "row": t.field("r").cast(pa.int64()), "seq": rows.column("s").cast(pa.int64())},
                    schema=ENTRIES)


def complete(data: pa.Table, key: list[str], columns: list[str], root: Path, live: list[str]) -> pa.Table:
    """`data` (key-sorted versions) with every partial update completed: a column it did not
    carry takes the value of the key's newest older version that carried it — in `data`, or the
    key's newest version in the `live` deltas (relative paths; checkpoints pass only those the
    key index names as holding a partially updated key's newest version). Columns no version carried stay
    unset (their bit kept: reads of the partition then merge). The merge's own fill, at write time."""
    keys = ", ".join(_q(k) for k in key)
    bit = {c: i for i, c in enumerate(columns)}
    con = engine.cursor(exact_floats=engine.has_floats(data.schema))
    try:
        con.register("batch", data)
        con.execute(f"CREATE OR REPLACE TEMP TABLE __pk AS SELECT DISTINCT {keys} FROM batch WHERE {_q(UNSET_MASK)} <> 0")
        prefix = str(root) + os.sep
        versions = f"SELECT *, 0 AS __src FROM batch SEMI JOIN __pk USING ({keys})"
        if live:
            older = (f"SELECT * FROM read_parquet([{', '.join(_lit(prefix + p) for p in live)}], union_by_name = true)"
                     f" SEMI JOIN __pk USING ({keys}) QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {_q(SEQ)} DESC) = 1")
            versions += f" UNION ALL BY NAME SELECT *, 1 AS __src FROM ({older})"
        window = f"PARTITION BY {keys} ORDER BY {_q(SEQ)} DESC ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING"
        out, still = [], []
        for c in columns:
            if c in key:
                out.append(_q(c))
                continue
            unset = f"(({_q(UNSET_MASK)} >> {bit[c]}) & 1 = 1)"
            found = f"first_value(CASE WHEN NOT {unset} THEN struct_pack(v := {_q(c)}) END IGNORE NULLS) OVER ({window})"
            out.append(f"CASE WHEN {unset} THEN ({found}).v ELSE {_q(c)} END AS {_q(c)}")
            still.append(f"CASE WHEN {unset} AND {found} IS NULL THEN {1 << bit[c]} ELSE 0 END")
        filled = (f"SELECT {', '.join(out)}, {_q(SEQ)}, {_q(OP)}, ({' + '.join(still) or '0'})::BIGINT AS {_q(UNSET_MASK)}, __src"
                  f" FROM ({versions})")
        return con.sql(
            f"SELECT * EXCLUDE (__src) FROM ({filled}) WHERE __src = 0"
            f" UNION ALL SELECT * FROM batch ANTI JOIN __pk USING ({keys})"
            f" ORDER BY {keys}, {_q(SEQ)} DESC"
        ).to_arrow_table()
    finally:
        con.close()


def rebuild(data: pa.Table, rel: str, key: list[str], root: Path, others: list[str]) -> pa.Table:
    """The entries a compaction output needs, for a partition whose live deltas will be `others`
    (relative paths) plus `data` (a key-sorted delta about to be written at `rel`): for each
    version of a key that `data` holds, in any of them, the seq of the key's next newer version,
    if any.

    Keys `data` does not hold are left out (a scan of the others' key columns, not a sort of all
    their versions): the merge changed none of their versions (a tier merge moves versions
    without dropping any; a base merge's inputs are older than every other delta, so it can fold
    away a key's versions without making two versions in others adjacent that were not), and
    each of their entries is already held by a live delta holding the key — the one holding the
    superseding version (a checkpoint records the version it supersedes) or, since a compaction
    moved one of the two, that compaction's output (it restated all entries of its keys)."""
    return Restatement.of(data, key, root, others).entries(rel)


class Restatement:
    """`rebuild` in two steps, so that a compaction computes the expensive part (a scan of the
    partition's other deltas) before it takes the partition's writer lock, while checkpoints go
    on, and under the lock only accounts for the deltas those checkpoints added meanwhile.

    `of` restates the entries against the other deltas as they are then (`others`). Deltas
    added after that, each holding only versions newer than every version of the output and of
    `others` (checkpoints: the only writers besides compaction, which serializes with itself),
    supersede, for each key they hold, that key's newest version before them; their own sidecars
    name it, but where it is a version of the output they name the compaction's input holding
    it, which the swap retires (entries naming retired deltas are ignored). `entries` restates
    those: for each key of the added deltas whose newest version among the output and `others`
    is in the output, an entry (output row, the key's oldest seq in the added deltas). Every
    other entry the added deltas imply is held by their own sidecars, naming live deltas."""

    def __init__(self, restated: pa.Table, newest: pa.Table, key: list[str]):
        self.restated = restated  # ENTRIES, target null for rows of the output itself
        self.newest = newest  # key columns and `__row`: the output's rows holding their key's newest version
        self.key = key

    @classmethod
    def of(cls, data: pa.Table, key: list[str], root: Path, others: list[str]) -> "Restatement":
        keys = ", ".join(_q(k) for k in key)
        prefix = str(root) + os.sep
        con = engine.cursor()
        try:
            # Each row's position numbered here, not by DuckDB: `row_number() OVER ()` promises
            # no order, and a wrong number would hide another row of the output.
            fresh = data.select(list(key) + [SEQ])
            con.register("fresh", fresh.append_column("__row", pa.array(np.arange(fresh.num_rows, dtype=np.int64))))
            parts = [f"SELECT {keys}, {_q(SEQ)}, NULL::VARCHAR AS __target, __row FROM fresh"]
            if others:
                parts.append(
                    f"SELECT {keys}, {_q(SEQ)}, substr(filename, {len(prefix) + 1}) AS __target, file_row_number::BIGINT AS __row"
                    f" FROM {_files_sql([prefix + p for p in others])} SEMI JOIN (SELECT DISTINCT {keys} FROM fresh) USING ({keys})"
                )
            versions = con.sql(
                f"SELECT {keys}, __target, __row, lag({_q(SEQ)}) OVER (PARTITION BY {keys} ORDER BY {_q(SEQ)} DESC) AS __newer"
                f" FROM ({' UNION ALL '.join(parts)})"
            ).to_arrow_table()
        finally:
            con.close()
        superseded = pc.is_valid(versions.column("__newer"))
        restated = versions.filter(superseded).select(["__target", "__row", "__newer"]).rename_columns(ENTRIES.names)
        mine = pc.and_(pc.invert(superseded), pc.is_null(versions.column("__target")))
        newest = versions.filter(mine).select([*key, "__row"])
        return cls(restated.cast(ENTRIES), newest, key)

    def entries(self, rel: str, root: Path | None = None, added: list[str] = ()) -> pa.Table:
        """The output's entries when written at `rel`, with the partition's live deltas being the
        `others` it was restated against plus `added` (relative paths under `root`)."""
        restated = self.restated.set_column(0, "target", pc.fill_null(self.restated.column("target"), rel))
        if not added or not self.newest.num_rows:
            return restated
        keys = ", ".join(_q(k) for k in self.key)
        prefix = str(root) + os.sep
        con = engine.cursor()
        try:
            con.register("newest", self.newest)
            later = con.sql(
                f"SELECT n.__row, a.__s FROM newest n JOIN (SELECT {keys}, min({_q(SEQ)}) AS __s FROM"
                f" read_parquet([{', '.join(_lit(prefix + p) for p in added)}], union_by_name = true) GROUP BY {keys})"
                f" a USING ({keys})"
            ).to_arrow_table()
        finally:
            con.close()
        more = pa.table({"target": _repeat(rel, later.num_rows), "row": later.column("__row").cast(pa.int64()),
                         "seq": later.column("__s").cast(pa.int64())}, schema=ENTRIES)
        return pa.concat_tables([restated, more])


def write_sidecar(path: Path, entries: pa.Table) -> None:
    """Write the entries to a staged local file (the caller stores it in the warehouse)."""
    pq.write_table(entries.sort_by([("target", "ascending"), ("row", "ascending")]), path, compression="zstd")


@contextmanager
def partition_lock(folder: Path) -> Iterator[None]:
    """Serialize the writers (checkpoints, compactions) of one partition, across processes of
    one machine (`folder` is local: htap.replica.warehouse.Warehouse.lock_dir)."""
    with _file_lock(folder, ".lock"):
        yield


@contextmanager
def layout_lock(table_folder: Path) -> Iterator[None]:
    """Serialize the writers that route rows by a table's current layout (checkpoints, from
    reading the layout to their metadata commit) with the commit of a repartition, which
    changes it (htap.replica.repartition). Taken before any partition lock of the table."""
    with _file_lock(table_folder, ".layout.lock"):
        yield


@contextmanager
def _file_lock(folder: Path, name: str) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# --- reading -------------------------------------------------------------------------------------

def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclasses.dataclass(frozen=True)
class Vectors:
    """The footers and deletion vectors of a set of deltas at one seq, read once (a one-task read
    loads every partition's at once).
    `hidden(paths)` answers for one partition's deltas, trusting nothing a footer does not vouch
    for."""

    seq: int
    rows: dict[str, int]  # delta -> its row count
    promised: dict[str, int]  # delta -> entries its footer records (absent: no deletion vectors)
    found: dict[str, int]  # delta -> entries in its sidecar (sidecars read only where promised)
    entries: dict[str, dict[str, np.ndarray]]  # delta -> its sidecar's entries at or below seq: target -> rows

    def hidden(self, paths: list[str]) -> dict[str, np.ndarray] | None:
        """Per delta of `paths` (one partition), the rows a newer version at or below the seq
        supersedes; None when some delta has no deletion vectors or its sidecar does not hold
        what its footer promises (the caller then merges)."""
        per_target: dict[str, list[np.ndarray]] = {}
        for rel in paths:
            n = self.promised.get(rel)
            if n is None:
                return None
            if n:
                if self.found.get(rel) != n:
                    log.warning("deletion vectors of %s damaged (footer says %d entries): reading with a merge", rel, n)
                    return None
                for target, rows in self.entries.get(rel, {}).items():
                    per_target.setdefault(target, []).append(rows)
        return {t: rows[0] if len(rows) == 1 else np.concatenate(rows) for t, rows in per_target.items()}


def load(root: Path, paths: list[str], seq: int) -> Vectors | None:
    """The footers of `paths` and the entries at or below `seq` of the sidecars they promise
    (parsed with pyarrow, or as last parsed: `_PARSED`), grouped per target in numpy, so no
    Python touches an entry; None when a footer or a sidecar cannot be read at all (the caller
    then merges, or loads fewer deltas at a time, so that one bad file costs only its own
    partition the fast path)."""
    rows: dict[str, int] = {}
    promised: dict[str, int] = {}
    try:
        for rel in paths:
            rows[rel], count = _PARSED.get(root / rel, _read_footer)
            if count is not None:
                promised[rel] = count
    except (OSError, ValueError, pa.ArrowException):
        return None  # a damaged delta: the merge's read reports it
    found: dict[str, int] = {}
    entries: dict[str, dict[str, np.ndarray]] = {}
    for rel in paths:
        if not promised.get(rel):
            continue
        try:
            found[rel], hidden = _PARSED.get(root / sidecar(rel), _read_sidecar).at(int(seq))
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:
            log.warning("deletion vectors of %s unreadable (%s): reading with a merge", rel, str(e).splitlines()[0])
            return None
        if hidden:
            entries[rel] = hidden
    return Vectors(int(seq), rows, promised, found, entries)


def _read_footer(path: Path) -> tuple[tuple[int, int | None], int]:
    """A delta's rows and the sidecar entries its footer promises (None: no deletion vectors)."""
    meta = pq.read_metadata(path)
    count = (meta.metadata or {}).get(FOOTER_KEY)
    return (meta.num_rows, int(count) if count is not None else None), 1


@dataclasses.dataclass(frozen=True)
class _Sidecar:
    """A sidecar's entries as parsed: per entry its target's code in `targets`, row and seq."""

    targets: list[str]
    codes: np.ndarray
    row: np.ndarray
    seq: np.ndarray

    def at(self, seq: int) -> tuple[int, dict[str, np.ndarray]]:
        """How many entries it holds, and its entries at or below `seq`: target -> rows."""
        mine = self.seq <= seq
        codes, row = self.codes[mine], self.row[mine]
        out = {}
        for code, name in enumerate(self.targets):
            hidden = row[codes == code]
            if len(hidden):
                out[name] = hidden
        return len(self.seq), out


def _read_sidecar(path: Path) -> tuple[_Sidecar, int]:
    """A sidecar's entries, and their number as the cache's weight (htap.replica.dv._ParsedFiles)."""
    # One thread: a sidecar is small, and handing its columns to a thread pool costs more than
    # decoding them (2x on a loaded machine).
    table = pq.ParquetFile(path, read_dictionary=["target"]).read(columns=["target", "row", "seq"], use_threads=False)
    target = table.unify_dictionaries().column("target").combine_chunks() if table.num_rows else None
    parsed = _Sidecar(
        targets=target.dictionary.to_pylist() if target is not None else [],
        codes=target.indices.to_numpy(zero_copy_only=False) if target is not None else np.empty(0, np.int32),
        row=table.column("row").to_numpy(),
        seq=table.column("seq").to_numpy(),
    )
    return parsed, max(1, table.num_rows)


class _ParsedFiles:
    """Footers and sidecars as last parsed, by path, so that a table read again (the next query,
    the next task of a Python worker Spark reuses) does not parse them again: a 1M-row partition
    with ten 20k-row deltas spent 16 of its 61 ms reading sidecars. Deltas and sidecars are
    immutable and their names never reused, but nothing is trusted on that alone: an entry is used
    only while the file's inode, size and modification time are those it was parsed at (a damaged
    or rewritten file is parsed again, and found damaged). Holds up to `budget` weight (sidecar
    entries; a footer weighs 1), least recently used first out."""

    def __init__(self, budget: int):
        self.budget = budget
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[tuple[int, int, int], object, int]] = OrderedDict()
        self._weight = 0

    def get(self, path: Path, parse):
        """What `parse(path)` (returning (value, weight)) returns for the file as it is now."""
        st = os.stat(path)
        stamp, key = (st.st_ino, st.st_size, st.st_mtime_ns), str(path)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] == stamp:
                self._items.move_to_end(key)
                return hit[1]
        value, weight = parse(path)
        with self._lock:
            old = self._items.pop(key, None)
            self._weight += weight - (old[2] if old else 0)
            self._items[key] = (stamp, value, weight)
            while self._weight > self.budget and len(self._items) > 1:
                _, (_, _, w) = self._items.popitem(last=False)
                self._weight -= w
        return value


# Sidecar entries (20 bytes each: ~40 MB) a process keeps parsed: every Python worker of a Spark
# executor keeps its own.
PARSED_BUDGET = 2_000_000
_PARSED = _ParsedFiles(PARSED_BUDGET)


# A delta at least this long is scanned on its own, positionally joined with its mask; shorter
# ones with hidden rows share multi-file scans filtered by one bitmap each, of at most
# SHARED_SCAN_ROWS rows. Each scan of a UNION ALL costs about as much as reading ~100k rows
# (measured: ten 20k-row deltas per partition read one by one cost 5x one scan of them all),
# while testing a bitmap costs more per row than a positional join, and more the longer the
# bitmap (DuckDB copies the constant per vector of rows); a hash anti-join of the hidden rows
# cost 1.3-2x the bitmap.
OWN_SCAN_ROWS = 256 * 1024
SHARED_SCAN_ROWS = 1024 * 1024


def visible_source(
    con, root: Path, paths: list[str], seq: int, columns: list[str], name: str, vectors: Vectors | None = None,
    *, own_scan_rows: int = OWN_SCAN_ROWS, shared_scan_rows: int = SHARED_SCAN_ROWS,
) -> str | None:
    """A relation (SQL) of the partition's versions that no newer version at or below `seq`
    supersedes — `columns`, `_seq` and `_op`. The caller still filters `_seq <= seq`, the
    truncation floor and `_op`; filters and projections it puts above push into the scans. None
    when some delta has no trustworthy deletion vectors (the caller then merges). `vectors`: what
    `load` read for these deltas and more at the same seq (else they are loaded here).

    Three kinds of scan, no hashing and no per-key work in any:
    - the deltas none of whose rows is hidden at `seq`: one plain multi-file scan;
    - each delta of at least `own_scan_rows` rows with hidden rows: a scan of the file
      positionally joined with a boolean `keep` column built from its entries (DuckDB never
      pushes a filter below a positional join, so the rows stay aligned);
    - the shorter deltas with hidden rows: multi-file scans (`shared_scan_rows` rows at most)
      keeping a row iff its bit in a bitmap of their rows is set, the bit found by the row's
      `file_index` (its file's place in the scan's list) and `file_row_number`.
    Registers Arrow tables and sets variables on `con` named after `name`, which must be unique
    among the partition reads of one query on `con` (a joined scan reads several tables'
    partitions on one cursor, and its views are only evaluated at the end: a shared name would
    give every partition the last one's masks)."""
    if vectors is None or vectors.seq != int(seq):
        vectors = load(root, paths, seq)
    hidden = vectors.hidden(paths) if vectors is not None else None
    if hidden is None:
        return None
    cols = ", ".join(_q(c) for c in dict.fromkeys([*columns, SEQ, OP]))
    plain = [rel for rel in paths if rel not in hidden]
    own = [rel for rel in paths if rel in hidden and vectors.rows[rel] >= own_scan_rows]
    shared = [rel for rel in paths if rel in hidden and vectors.rows[rel] < own_scan_rows]
    parts = []
    if plain:
        parts.append(f"SELECT {cols} FROM {_scan(root, plain)}")
    for i, rel in enumerate(own):
        keep = np.ones(vectors.rows[rel], dtype=bool)
        keep[hidden[rel]] = False
        con.register(f"{name}_keep_{i}", pa.table({"__keep": keep}))
        parts.append(f"SELECT {cols} FROM (SELECT * FROM {_scan(root, [rel])} POSITIONAL JOIN {name}_keep_{i}) WHERE __keep")
    for g, group in enumerate(_groups(shared, vectors.rows, shared_scan_rows)):
        keep = np.ones(sum(vectors.rows[rel] for rel in group), dtype=bool)
        starts = np.cumsum([0] + [vectors.rows[rel] for rel in group[:-1]])
        for start, rel in zip(starts, group):
            keep[start + hidden[rel]] = False
        bits, offsets = f"{name}_bits_{g}", f"{name}_offsets_{g}"
        con.execute(f"SET VARIABLE {bits} = ?::BLOB::BIT", [np.packbits(keep, bitorder="big").tobytes()])
        con.execute(f"SET VARIABLE {offsets} = ?::BIGINT[]", [[int(x) for x in starts]])
        at = f"(getvariable('{offsets}')[file_index::BIGINT + 1] + file_row_number)::INTEGER"
        parts.append(f"SELECT {cols} FROM {_scan(root, group, numbered=True)} WHERE get_bit(getvariable('{bits}'), {at}) = 1")
    return "(" + " UNION ALL ".join(parts) + ")"


def _groups(paths: list[str], rows: dict[str, int], limit: int) -> list[list[str]]:
    """`paths` in order, cut into runs of at most `limit` rows (a longer delta alone)."""
    out: list[list[str]] = []
    total = limit
    for rel in paths:
        if total + rows[rel] > limit:
            out.append([])
            total = 0
        out[-1].append(rel)
        total += rows[rel]
    return out


def _scan(root: Path, paths: list[str], *, numbered: bool = False) -> str:
    """One multi-file Parquet scan of `paths`, in their order (`file_index` numbers them so);
    `numbered`: with each row's position in its file (`file_row_number`)."""
    files = ", ".join(_lit(str(root / rel)) for rel in paths)
    return f"read_parquet([{files}]{', file_row_number = true' if numbered else ''})"
