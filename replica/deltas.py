"""Writing deltas: a batch of changes -> one Parquet file sorted by (key ASC, seq DESC).

A delta file is staged locally and made durable in the warehouse (htap.replica.warehouse: a
local folder's fsync and rename, or an object store's acknowledged upload) before the metadata
transaction that references it commits: a crash leaves at worst an unreferenced file, never a
reference to a file that is not fully stored.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from htap import engine
from htap.errors import MovedKeyValuesUnknown, NoSuchTableError, TableError
from htap.observe import phase
from htap.replica import column_stats
from htap.replica import dv as dvs
from htap.replica import keyindex
from htap.replica.merge import ident, parquet_source
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import BASE_PREFIX, OP, OP_DELETE, ORD, SEQ, UNSET_MASK, TableInfo, delta_schema
from htap.replica.partitions import decode_bounds, split_by_partition
from htap.replica.warehouse import Warehouse, as_warehouse, fsync_path

log = logging.getLogger(__name__)

# Rows per Parquet row group. A lookup by key reads (decodes) the one row group its key's min/max
# statistics point to: 64k rows took 4.2 ms in DuckDB where 128k took 5.8 ms (1M-row file, same
# process, interleaved), while a whole-file scan + aggregate cost the same (15.0 vs 15.5 ms).
ROW_GROUP_ROWS = 64 * 1024


def table_dir(table: TableInfo) -> str:
    return f"{table.source}/{table.schema}.{table.name}-{table.id}"


def sort_versions(data: pa.Table, key: list[str]) -> pa.Table:
    """Keep the last version per (key, seq) in arrival order, sorted by key ASC, seq DESC.

    Within one transaction a key can change several times; its last change is its state at
    that seq. (A partial update followed by more changes in one transaction keeps the last.)
    Arrow's sort (key ASC, seq DESC, arrival DESC) then the first row of each (key, seq): the
    same order as DuckDB's (bytes for strings, NaN last), 5-7x faster than a window in SQL on
    a 1M-row bulk change; key types Arrow cannot sort take the SQL.
    """
    try:
        order = pc.sort_indices(data, sort_keys=[(k, "ascending") for k in key] + [(SEQ, "descending"), (ORD, "descending")])
    except pa.ArrowNotImplementedError:
        return _sort_versions_sql(data, key)
    data = data.take(order).drop_columns([ORD])
    same = keyindex.same_as_previous(data, [*key, SEQ])
    if same.any():
        data = data.filter(pa.array(np.concatenate([[True], ~same])))
    return data


def _sort_versions_sql(data: pa.Table, key: list[str]) -> pa.Table:
    con = engine.cursor(exact_floats=engine.has_floats(data.schema))
    try:
        con.register("batch", data)
        keys = ", ".join(f'"{k}"' for k in key)
        return con.sql(
            f'SELECT * EXCLUDE ("{ORD}") FROM batch '
            f'QUALIFY row_number() OVER (PARTITION BY {keys}, "{SEQ}" ORDER BY "{ORD}" DESC) = 1 '
            f'ORDER BY {keys}, "{SEQ}" DESC'
        ).to_arrow_table()
    finally:
        con.close()


def partition_dir(table: TableInfo, part: int) -> str:
    """A partition's folder in the warehouse."""
    return f"{table_dir(table)}/p{part:04d}"


def partition_lock(warehouse: Warehouse, table: TableInfo, part: int):
    """The writer lock of one partition (htap.replica.dv)."""
    return dvs.partition_lock(warehouse.lock_dir(partition_dir(table, part)))


def layout_lock(warehouse: Warehouse, table: TableInfo):
    """The lock between the writers that route rows by the table's layout and a repartition's
    commit (htap.replica.dv)."""
    return dvs.layout_lock(warehouse.lock_dir(table_dir(table)))


# Deletion-vector entries of a delta about to be written: (its relative path, its sorted rows).
Entries = Callable[[str, pa.Table], pa.Table]


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns a delta's Parquet footer keeps min/max statistics of: all but floating point
    ones. Parquet leaves NaN out of a float column's min and max, and DuckDB (2.0) then skips a
    row group for `d > 100`, `d = 'NaN'` or `isnan(d)` although its NaN rows match (Spark orders
    NaN above every number): fuzz seed 44 query 885 read no row where Spark read two. Without
    statistics DuckDB reads those columns' row groups whole."""
    return [f.name for f in schema if not pa.types.is_floating(f.type)]


def write_delta(warehouse: Warehouse | Path, table: TableInfo, data: pa.Table, part: int = 0, dv: Entries | None = None,
                complete: Callable[[pa.Table], pa.Table] | None = None,
                seen: Callable[[pa.Table], None] | None = None) -> NewDelta:
    """Write `data` (table columns, _seq, _op, optionally _unset and _ord) as one durable delta file.

    With `_ord`, versions are first sorted and collapsed per (key, seq); without it the caller
    guarantees that order. With `dv`, the deletion-vector entries it returns are written to the
    delta's sidecar and counted in its footer (htap.replica.dv) — unless some version is a
    partial update (reads of its partition then merge, until a base compaction fills it).
    `seen` is shown the versions as they will be stored (sorted, partial updates completed)
    before `dv` records what they supersede.
    """
    if UNSET_MASK not in data.column_names:
        data = data.append_column(UNSET_MASK, pa.array(np.zeros(data.num_rows, dtype=np.int64)))
    if ORD in data.column_names:
        with phase("sort"):
            data = sort_versions(data, list(table.key))
    target = delta_schema(table.arrow_schema)
    data = data.select(target.names).cast(target)
    if complete is not None and pc.any(pc.not_equal(data.column(UNSET_MASK), 0)).as_py():
        arrived = pc.sum(pc.not_equal(data.column(UNSET_MASK), 0)).as_py()
        with phase("complete"):
            data = complete(data).select(target.names).cast(target)
        log.info("%s partition %d: %d partial updates completed at write time", table.qualified_name, part, arrived)
    if seen is not None:
        seen(data)
    warehouse = as_warehouse(warehouse)
    seqs = data.column(SEQ)
    rel = f"{partition_dir(table, part)}/{uuid.uuid4().hex}.parquet"
    partial = pc.sum(pc.not_equal(data.column(UNSET_MASK), 0)).as_py() or 0
    dv_checksum = None
    if dv is not None and not partial:
        with phase("dv"):
            entries = dv(rel, data)
        if entries.num_rows:  # the sidecar is stored before its delta
            side = warehouse.staging_path(dvs.sidecar(rel))
            with phase("parquet"):
                dvs.write_sidecar(side, entries)
            with phase("durable"):
                dv_checksum = warehouse.put(dvs.sidecar(rel), side)
        data = data.replace_schema_metadata({**(data.schema.metadata or {}), dvs.FOOTER_KEY: str(entries.num_rows).encode()})
    tmp = warehouse.staging_path(rel)
    with phase("parquet"):
        pq.write_table(data, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd",
                       write_statistics=statistics_columns(data.schema))
    size = tmp.stat().st_size
    with phase("durable"):
        checksum = warehouse.put(rel, tmp)
    bounds = pc.min_max(seqs)
    deletes = pc.sum(pc.equal(data.column(OP), OP_DELETE)).as_py() or 0
    return NewDelta(
        table_id=table.id,
        path=rel,
        min_seq=bounds["min"].as_py(),
        max_seq=bounds["max"].as_py(),
        rows=data.num_rows,
        bytes=size,
        partial_rows=partial,
        part=part,
        deletes=deletes,
        unique_keys=_unique_sorted_keys(data, list(table.key)),
        schema_version=table.schema_version,
        checksum=checksum,
        dv_checksum=dv_checksum,
        column_stats=column_stats.encode(column_stats.of_delta(data, table.arrow_schema.names)),
    )


class StagedDelta:
    """A delta whose rows are written and flushed to the local disk but whose footer is not yet:
    a compaction writes its output (a 1M-row base file takes a second or more) before it takes
    the partition's writer lock, and under the lock only counts its deletion vectors in the
    footer, closes the file and stores it (htap.replica.compaction). `data` as for
    `write_delta`, without `_ord` (already sorted). `discard` drops it if it is not stored."""

    def __init__(self, warehouse: Warehouse | Path, table: TableInfo, data: pa.Table, part: int = 0):
        if UNSET_MASK not in data.column_names:
            data = data.append_column(UNSET_MASK, pa.array(np.zeros(data.num_rows, dtype=np.int64)))
        target = delta_schema(table.arrow_schema)
        self.data = data.select(target.names).cast(target)
        self.warehouse = as_warehouse(warehouse)
        self.table, self.part = table, part
        self.rel = f"{partition_dir(table, part)}/{uuid.uuid4().hex}.parquet"
        self.partial = pc.sum(pc.not_equal(self.data.column(UNSET_MASK), 0)).as_py() or 0
        self.column_stats = column_stats.encode(column_stats.of_delta(self.data, table.arrow_schema.names))
        self.tmp = self.warehouse.staging_path(self.rel)
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            self.tmp, self.data.schema, compression="zstd", write_statistics=statistics_columns(self.data.schema))
        try:
            self._writer.write_table(self.data, row_group_size=ROW_GROUP_ROWS)
            fsync_path(self.tmp)  # so that storing it under the lock has little left to flush
        except BaseException:
            self.discard()
            raise

    def finish(self, dv: Entries | None = None) -> NewDelta:
        """Store the delta (and its deletion vectors: as `write_delta`'s `dv`)."""
        assert self._writer is not None, "a staged delta is stored once"
        data, rel, warehouse = self.data, self.rel, self.warehouse
        dv_checksum = None
        if dv is not None and not self.partial:
            entries = dv(rel, data)
            if entries.num_rows:  # the sidecar is stored before its delta
                side = warehouse.staging_path(dvs.sidecar(rel))
                dvs.write_sidecar(side, entries)
                dv_checksum = warehouse.put(dvs.sidecar(rel), side)
            self._writer.add_key_value_metadata({dvs.FOOTER_KEY: str(entries.num_rows).encode()})
        writer, self._writer = self._writer, None
        writer.close()
        size = self.tmp.stat().st_size
        checksum = warehouse.put(rel, self.tmp)
        bounds = pc.min_max(data.column(SEQ))
        return NewDelta(
            table_id=self.table.id,
            path=rel,
            min_seq=bounds["min"].as_py(),
            max_seq=bounds["max"].as_py(),
            rows=data.num_rows,
            bytes=size,
            partial_rows=self.partial,
            part=self.part,
            deletes=pc.sum(pc.equal(data.column(OP), OP_DELETE)).as_py() or 0,
            unique_keys=_unique_sorted_keys(data, list(self.table.key)),
            schema_version=self.table.schema_version,
            checksum=checksum,
            dv_checksum=dv_checksum,
            column_stats=self.column_stats,
        )

    def discard(self) -> None:
        """Drop the staged file unless it was stored (a no-op then)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            finally:
                self.tmp.unlink(missing_ok=True)


def _unique_sorted_keys(data: pa.Table, key: list[str]) -> bool:
    """Whether a key-sorted table has at most one row per key (no two adjacent rows share it)."""
    return not keyindex.same_as_previous(data, key).any()


def delete_delta_files(warehouse: Warehouse | Path, rel: str) -> None:
    """A delta file and its deletion-vector sidecar, if any."""
    warehouse = as_warehouse(warehouse)
    warehouse.delete(rel)
    warehouse.delete(dvs.sidecar(rel))


def _files(live: "Mapping[str, str | None] | list[str]") -> dict[str, str | None]:
    return dict(live) if isinstance(live, Mapping) else dict.fromkeys(live)


@dataclasses.dataclass(frozen=True)
class Changed:
    """What a checkpoint changes in one partition of a table, as the views over it need it
    (htap.replica.view_maintenance.group_changes): the versions it stores (sorted, partial
    updates completed) and `before`, the newest live version of each key they change (as
    stored: upserts and deletes, table columns — those no view reads NULL —, _seq, _op, _unset;
    keys never seen are absent)
    — the key's row as of the last checkpoint, when it is an upsert."""

    part: int
    versions: pa.Table
    before: pa.Table


def write_partitioned(
    warehouse: Warehouse | Path,
    table: TableInfo,
    data: pa.Table,
    live: "Callable[[int], Mapping[str, str | None] | list[str]] | None" = None,
    locks: ExitStack | None = None,
    store: MetadataStore | None = None,
    changed: list[Changed] | None = None,
    before_columns: Sequence[str] | None = None,
) -> list[NewDelta]:
    """One delta per partition that `data` touches. With `live` (a partition's live deltas:
    relative paths, or paths -> checksums), each delta records the versions it supersedes (htap.replica.dv),
    found with the partition's key index (htap.replica.keyindex), made to cover `live` first; `locks`
    then holds each partition's writer lock, taken before `live` is asked, until the caller has
    committed the deltas. Partial updates (unchanged TOAST) are then completed from the
    versions they update, so reads never fill columns; a key change's partial row (`_base:<key>`
    columns: the old key, htap.ingest.buffer) from the old key's newest live version, in
    whichever partition holds it (its lock taken too), first of all.

    With `locks` and `store`, the table's layout lock is taken first and the rows are routed
    by the layout the store has now (a repartition may have committed since `table` was read);
    holding it until the commit keeps a repartition from committing in between.

    With `changed` (and `live`), each partition's `Changed` is appended to it: its versions and
    their keys' newest live versions, looked up in the key index before the delta supersedes
    them. The live deltas are those committed, so with one call per table and checkpoint (as
    the checkpointer makes) `before` is the table as of the last checkpoint. `before_columns`:
    the table's columns `before` holds beside the key, `_seq`, `_op` and `_unset`, the others
    NULL (None: all of them; empty: no `before` is read) — what the views read of a changed key's previous row:
    reading the other columns of every row group holding one was most of a checkpoint of
    scattered updates."""
    if changed is not None and live is None:
        raise ValueError("write_partitioned: `changed` needs `live` (the key index finds the versions changed)")
    warehouse = as_warehouse(warehouse)
    if locks is not None and store is not None:
        with phase("layout_lock"):
            locks.enter_context(layout_lock(warehouse, table))
        table = current_layout(store, table)
    layout = table.layout
    splits = decode_bounds(layout.bounds_b64)
    out = []
    key = list(table.key)
    key_schema = pa.schema([table.arrow_schema.field(k) for k in key])
    held: set[int] = set()

    def lock(part: int) -> None:
        if locks is not None and part not in held:
            with phase("partition_lock"):
                locks.enter_context(partition_lock(warehouse, table, part))
            held.add(part)

    def index_of(part: int, older: dict[str, str | None]):
        keys = keyindex.of(warehouse.lock_dir(partition_dir(table, part)), key_schema)

        def current() -> keyindex.KeyIndex:
            """The partition's index, made to cover exactly its live deltas (htap.replica.keyindex)."""
            need = keys.missing(list(older))
            if need or keys.opened is not None:  # (the first use also tells how it was opened)
                with phase("index_sync"), warehouse.local({p: older[p] for p in need}) as root:
                    keys.sync(root, list(older))
            return keys
        return keys, current

    if any(n.startswith(BASE_PREFIX) for n in data.column_names):
        data = _complete_moved(warehouse, table, data, splits, lock, live, index_of)
    for index, rows in split_by_partition(data, table.key[0], splits):
        part = layout.ids[index]
        entries = complete = seen = None
        if live is not None:
            lock(part)
            older = _files(live(part))
            keys, current = index_of(part, older)

            def entries(rel: str, sorted_rows: pa.Table, keys=keys, current=current) -> pa.Table:
                with keys.lock:
                    found, _ = current().supersede(sorted_rows, rel)
                return pa.concat_tables([dvs.within(sorted_rows, key, rel), found.cast(dvs.ENTRIES)])

            def complete(sorted_rows: pa.Table, keys=keys, older=older, current=current) -> pa.Table:
                # Only the deltas holding the newest older version of a partially updated key.
                partial = sorted_rows.filter(pc.not_equal(sorted_rows.column(UNSET_MASK), 0)).select(key)
                first, _ = keyindex.newest_per_key(partial, key)
                with keys.lock:
                    targets, _, _ = current().where(partial.take(pa.array(first)).cast(key_schema))
                holding = {p: older[p] for p in sorted(set(targets.to_pylist()))}
                with warehouse.local(holding) as root:
                    return dvs.complete(sorted_rows, key, table.arrow_schema.names, root, list(holding))

            if changed is not None:
                def seen(sorted_rows: pa.Table, part=part, keys=keys, older=older, current=current) -> None:
                    with phase("before_images"):
                        before = _newest_versions(warehouse, table, sorted_rows, keys, older, current, before_columns)
                    changed.append(Changed(part, sorted_rows, before))
        out.append(write_delta(warehouse, table, rows, part, dv=entries, complete=complete, seen=seen))
    return out


def _newest_versions(warehouse: Warehouse, table: TableInfo, rows: pa.Table, keys: keyindex.KeyIndex,
                     older: dict[str, str | None], current: Callable[[], keyindex.KeyIndex],
                     columns: Sequence[str] | None = None) -> pa.Table:
    """The newest version in the partition's live deltas (`older`) of each key in `rows`, read
    from the rows the key index points to (only the row groups holding them, only the key and
    `columns`: None, all; the other columns NULL)."""
    key = list(table.key)
    if columns is not None and not columns:
        return delta_schema(table.arrow_schema).empty_table()
    names = table.arrow_schema.names if columns is None else [c for c in table.arrow_schema.names
                                                              if c in key or c in columns]
    key_schema = pa.schema([table.arrow_schema.field(k) for k in key])
    unique = rows.select(key).group_by(key, use_threads=False).aggregate([]).select(key).cast(key_schema)
    with keys.lock:
        targets, at, _ = current().where(unique)
    targets = targets.to_pylist()
    holding = {p: older[p] for p in sorted(set(targets))}
    found = []
    with warehouse.local(holding) as root:
        for p in holding:
            wanted = np.array([r for t, r in zip(targets, at.tolist()) if t == p], np.int64)
            found.append(_read_rows(root / p, wanted, names))
    stored = delta_schema(table.arrow_schema)
    if not found:
        return stored.empty_table()
    read = pa.concat_tables(found, promote_options="permissive")
    return pa.Table.from_arrays([read.column(f.name).cast(f.type) if f.name in read.column_names
                                 else pa.nulls(read.num_rows, f.type) for f in stored], schema=stored)


def _complete_moved(warehouse: Warehouse, table: TableInfo, data: pa.Table, splits, lock: Callable[[int], None],
                    live, index_of) -> pa.Table:
    """`data` without its `_base:<key>` columns, every row that has them (a partial row whose
    key changed: htap.ingest.buffer.TableBuffer.change_key) completed from its old key's newest
    version in the live deltas — in the partition holding the old key (`lock` takes its writer
    lock; `index_of` gives its key index), which may not be the new key's. Buffered versions of
    the old key are not involved: the buffer filled the row from them, and what stayed unset
    comes from before this checkpoint. No such version, a delete, or one lacking a value: the
    value cannot be known, so the table fails (TableError) rather than store NULL."""
    key = list(table.key)
    base_cols = [BASE_PREFIX + k for k in key]
    moved = pc.is_valid(data.column(base_cols[0])).to_numpy(zero_copy_only=False)
    rest = data.drop_columns([c for c in data.column_names if c.startswith(BASE_PREFIX)])
    if not moved.any():
        return rest
    layout = table.layout
    key_schema = pa.schema([table.arrow_schema.field(k) for k in key])
    sub = data.filter(pa.array(moved))
    old_keys = sub.select(base_cols).rename_columns(key).cast(key_schema)

    def fail(what: str, keys: list) -> TableError:
        shown = ", ".join(repr(k) for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        return MovedKeyValuesUnknown(table.qualified_name, f"{shown} to another key", f"the old key {what} in the replica")

    if live is None:
        raise fail("cannot be looked up (no live deltas given)", old_keys.to_pylist())
    found = []
    for index, wanted in split_by_partition(old_keys, key[0], splits):
        part = layout.ids[index]
        lock(part)
        older = _files(live(part))
        keys, current = index_of(part, older)
        unique = wanted.group_by(key, use_threads=False).aggregate([]).select(key).cast(key_schema)
        with keys.lock:
            targets, rows, hit = current().where(unique)
        if not hit.all():
            raise fail("has no version", unique.filter(pa.array(~hit)).to_pylist())
        targets = targets.to_pylist()
        holding = {p: older[p] for p in sorted(set(targets))}
        with warehouse.local(holding) as root:
            for p in holding:
                at = np.array([r for t, r in zip(targets, rows) if t == p], np.int64)
                found.append(_read_rows(root / p, at, table.arrow_schema.names))
    base = pa.concat_tables(found, promote_options="permissive")
    where = {k: j for j, k in enumerate(zip(*(base.column(k).to_pylist() for k in key)))}
    take = pa.array([where[k] for k in zip(*(old_keys.column(k).to_pylist() for k in key))], pa.int64())
    base = base.take(take)  # aligned with `sub`
    gone = pc.equal(base.column(OP), OP_DELETE).to_numpy(zero_copy_only=False)
    if gone.any():
        raise fail("was deleted", old_keys.filter(pa.array(gone)).to_pylist())
    mask = sub.column(UNSET_MASK).to_numpy(zero_copy_only=False).astype(np.int64)
    lacking = (mask & base.column(UNSET_MASK).to_numpy(zero_copy_only=False).astype(np.int64)) != 0
    if lacking.any():
        raise fail("lacks some of them too", old_keys.filter(pa.array(lacking)).to_pylist())
    columns = []
    for i, f in enumerate(table.arrow_schema):
        col = sub.column(f.name)
        if f.name not in key and ((mask >> i) & 1).any():
            # (a column added after the old version was written: NULL, as reads of that delta)
            old = base.column(f.name).cast(col.type) if f.name in base.column_names else pa.nulls(base.num_rows, col.type)
            col = pc.if_else(pa.array(((mask >> i) & 1).astype(bool)), old, col)
        columns.append(col)
    filled = sub.drop_columns(base_cols)
    for i, f in enumerate(table.arrow_schema):
        filled = filled.set_column(filled.schema.get_field_index(f.name), f.name, columns[i])
    filled = filled.set_column(filled.schema.get_field_index(UNSET_MASK), UNSET_MASK,
                               pa.array(np.zeros(filled.num_rows, np.int64)).cast(rest.schema.field(UNSET_MASK).type))
    log.info("%s: %d key-changing partial updates completed from their old keys", table.qualified_name, filled.num_rows)
    return pa.concat_tables([rest.filter(pa.array(~moved)), filled.cast(rest.schema)])


def _read_rows(path: Path, rows: np.ndarray, names: list[str]) -> pa.Table:
    """Rows `rows` (ordinals) of a delta file, in that order: the columns `names` (of the
    table's), _seq, _op and _unset; only the row groups holding them are read. Where DuckDB
    returns every column exactly (`_duckdb_exact`), DuckDB reads them: inside those row groups it
    decodes the other columns only for the vectors holding a wanted row (3-7x less than pyarrow's
    whole row groups for 1,200 rows scattered over 6M); else pyarrow does."""
    available = pq.read_schema(path)
    cols = [c for c in [*names, SEQ, OP, UNSET_MASK] if c in available.names]
    if all(_duckdb_exact(available.field(c).type) for c in cols):
        con = engine.cursor()
        try:
            con.register("__wanted", pa.table({"r": pa.array(rows, pa.int64()),
                                               "i": pa.array(np.arange(len(rows), dtype=np.int64))}))
            picked = ", ".join(f"d.{ident(c)}" for c in cols)
            data = con.sql(f"SELECT {picked} FROM {parquet_source([str(path)], row_numbers=True)} AS d"
                           f" JOIN __wanted AS w ON d.file_row_number = w.r ORDER BY w.i").to_arrow_table()
        finally:
            con.close()
        data = data.cast(pa.schema([available.field(c) for c in cols]))
    else:
        data = _read_row_groups(path, rows, cols)
    if UNSET_MASK not in data.column_names:
        data = data.append_column(UNSET_MASK, pa.array(np.zeros(data.num_rows, np.int64)))
    return data


def _duckdb_exact(t: pa.DataType) -> bool:
    """Whether DuckDB reads a Parquet column of Arrow type `t` back as the same values of the same
    type (tests/unit/test_delta_rows.py): not decimal256, times, timestamps' zones, nested types."""
    return (pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_date32(t)
            or (pa.types.is_decimal128(t) and t.precision <= 38))


def _read_row_groups(path: Path, rows: np.ndarray, cols: list[str]) -> pa.Table:
    """`_read_rows` by pyarrow: the whole row groups holding `rows`, then the rows."""
    pf = pq.ParquetFile(path)
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    groups = sorted(set((np.searchsorted(starts, rows, side="right") - 1).tolist()))
    data = pf.read_row_groups(groups, columns=cols)
    offsets = np.concatenate([[0], np.cumsum([sizes[g] for g in groups])]).astype(np.int64)
    local = np.array([offsets[groups.index(g)] + r - starts[g] for g, r in
                      zip((np.searchsorted(starts, rows, side="right") - 1).tolist(), rows.tolist())], np.int64)
    return data.take(pa.array(local))


def current_layout(store: MetadataStore, table: TableInfo) -> TableInfo:
    """`table` with the partition layout the store has now (unchanged if the table is gone: its
    deltas are then dropped by the checkpoint's commit)."""
    try:
        fresh = store.table_by_id(table.id)
    except NoSuchTableError:
        return table
    return dataclasses.replace(table, partition_bounds_b64=fresh.partition_bounds_b64, partition_ids=fresh.partition_ids)


def first_versions(table: TableInfo) -> Entries:
    """Deletion-vector entries of a partition's first delta (the initial copy): only versions
    superseded inside it."""
    return lambda rel, rows: dvs.within(rows, list(table.key), rel)
