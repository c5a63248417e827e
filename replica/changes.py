"""A table's changes between two seqs (issue 29: the change feed), from the replica's versions.

Every delta row is a version of a key at the seq of the source transaction that wrote it, so the
changes in (start, end] are the versions with start < _seq <= end, each compared with the key's
previous version (its preimage): an upsert after a live version is an update (a preimage row and
a postimage row, as Delta Lake's change data feed names them), an upsert after none or after a
delete is an insert, a delete of a live version is a delete (carrying that version's values). A
key change is a delete of the old key and an insert of the new one (the replica stores it so).
Columns a partial update did not carry (unchanged TOAST) are filled from the key's older
versions, as reads fill them. A truncation at seq t is a delete of every row live before t.

Exact inside the queryable window only: compaction folds versions below its low end (or below
the oldest lease) into one, so a range that starts below it is refused (OutsideWindow, saying
how far behind it is and which setting keeps more). The range is read under a lease at its
start, so compaction cannot fold what it needs while it is read. Where the table's partition
layout changed (a repartition at seq S: the old partitions hold every version up to S, the new
ones the rows live at S and every later version) or a truncation falls inside, the range is read
in pieces that each use one layout and one truncation floor.

`_commit_timestamp` is when the replica made the change readable: the commit of the checkpoint
that stored it (the first of the source's safe points at or past its seq; every checkpoint that
stores changes records one), not the source's commit time, which the replica does not keep.
"""

from __future__ import annotations

import logging

import duckdb
import pyarrow as pa

from htap import engine
from htap.errors import InternalQueryError
from htap.replica.merge import current_rows_sql, evolved, ident, parquet_source, versioned_source
from htap.replica.metadata import MetadataStore
from htap.replica.models import OP, OP_UPSERT, SEQ, UNSET_MASK, TableInfo
from htap.replica.read_plans import OutsideWindow, queryable_window
from htap.replica.warehouse import Warehouse

log = logging.getLogger(__name__)

CHANGE_TYPE = "_change_type"
COMMIT_SEQ = "_commit_seq"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete", "truncate")
# "truncate": every row before this goes (a TRUNCATE is deletes of the rows, but a feed that
# starts before the table's copy, e.g. one running when the table was copied again, gets this
# marker and then the copy's rows as inserts: the rows it had are unknown to the replica)
# the order of a transaction's rows of one key: a preimage before its postimage
_TYPE_ORDER = {t: i for i, t in enumerate(("truncate", "delete", "update_preimage", "update_postimage", "insert"))}


def change_schema(table: TableInfo) -> pa.Schema:
    """The table's columns, then the change's type, seq and when it became readable."""
    return pa.schema([*table.arrow_schema, pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_SEQ, pa.int64()),
                      pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"))])


FEED_HOLDER = "feed:"  # leases of named change feeds: feed:<name>


def feed_holder(name: str) -> str:
    return FEED_HOLDER + name


def feed_pin(store: MetadataStore, table: TableInfo, name: str) -> int | None:
    """The seq a named feed's live lease holds on the table (None: none)."""
    seqs = [p.seq for p in store.live_pins(table.id) if p.holder == feed_holder(name)]
    return min(seqs) if seqs else None


def check_range(store: MetadataStore, table: TableInfo, start: int, end: int, window_s: float,
                pinned_from: int | None = None) -> None:
    """Refuse a range the replica cannot answer exactly, saying why and what to do. `pinned_from`:
    the seq a named feed's lease holds (compaction keeps every version above it), which extends
    the window down to it (not below the table's copy)."""
    if end < start:
        raise OutsideWindow(f"changes of {table.qualified_name}: the range ({start}, {end}] ends before it starts")
    window = queryable_window(store, table, window_s)
    if window is None:
        raise OutsideWindow(f"{table.qualified_name} is not readable (state: {table.state}); its changes neither")
    low = window.min_seq if pinned_from is None else max(table.copy_seq or 0, min(window.min_seq, pinned_from))
    if start < low:
        raise OutsideWindow(
            f"changes of {table.qualified_name} after seq {start} are no longer kept: the oldest seq it can answer "
            f"from is {low} ({low - start} behind it). Start a new change feed from a snapshot of the table, and raise "
            f"replica.window_s (now {window_s:g} s) to keep changes longer, or name the stream (feedName) so that "
            f"its progress keeps them" + (" (the table was copied again at that seq)" if low == table.copy_seq else "")
        )
    if end > window.max_seq:
        raise OutsideWindow(
            f"changes of {table.qualified_name} up to seq {end}: the replica has reached seq {window.max_seq} only"
        )


def read_changes(store: MetadataStore, warehouse: Warehouse, table: TableInfo, start: int, end: int,
                 window_s: float, lease_s: float | None, pinned_from: int | None = None) -> pa.Table:
    """The changes of `table` with start < seq <= end, in seq order (see the module docstring).
    `lease_s`: lease `start` for that long first (None: the caller holds a lease at or below it,
    at `pinned_from` if that is below the window, see check_range)."""
    schema = change_schema(table)
    check_range(store, table, start, end, window_s, pinned_from)
    if end == start:
        return schema.empty_table()
    if lease_s is not None:
        store.lease(table.id, start, lease_s)  # compaction keeps every version a read at `start` needs
        check_range(store, table, start, end, window_s, pinned_from)  # the window may have moved before the lease
    parts = []
    for kind, lo, hi, floor in _pieces(store, table, start, end):
        if kind == "truncate":  # every row live just before the truncation at `hi`
            parts.append(_rows_at(store, warehouse, table, hi - 1, floor, "delete", hi))
        else:
            parts.append(_versions(store, warehouse, table, lo, hi, floor))
    changes = pa.concat_tables(parts) if parts else None
    return _with_times(store, table, changes, schema)


def seq_within(store: MetadataStore, warehouse: Warehouse, table: TableInfo, start: int, budget: int, latest: int) -> int:
    """The highest seq up to `latest` whose range from `start` holds at most `budget` row versions,
    and at least the first seq after `start` that holds any: a transaction is never split (a
    stream's admission control, maxChangesPerTrigger)."""
    deltas = [d for d in _deltas_at(store, table, latest) if d.max_seq > start and d.min_seq <= latest]
    if not deltas:
        return latest
    with warehouse.local({d.path: d.checksum for d in deltas}) as root:
        counts = _query(table, f"SELECT {ident(SEQ)} AS seq, count(*) AS n FROM {parquet_source([str(root / d.path) for d in deltas])}"
                               f" WHERE {ident(SEQ)} > {int(start)} AND {ident(SEQ)} <= {int(latest)} GROUP BY 1 ORDER BY 1")
    if counts.num_rows == 0:
        return latest
    seqs, total = counts.column("seq").to_pylist(), 0
    for i, n in enumerate(counts.column("n").to_pylist()):
        total += n
        if total > budget:
            return seqs[max(i - 1, 0)]
    return latest


def _pieces(store: MetadataStore, table: TableInfo, start: int, end: int) -> list[tuple[str, int, int, int | None]]:
    """("versions", lo, hi, floor) and ("truncate", lo, t, floor) steps covering (start, end]."""
    cuts = sorted({layout.from_seq for layout, _why in store.layouts(table.id) if start < layout.from_seq < end})
    truncations = store.truncations_between(table.id, start, end)
    steps: list[tuple[str, int, int, int | None]] = []
    lo = start
    floor = store.truncated_at(table.id, start)
    for point in sorted({*cuts, *truncations}):
        if point in truncations:
            if point - 1 > lo:
                steps.append(("versions", lo, point - 1, floor))
            steps.append(("truncate", max(lo, point - 1), point, floor))
            lo, floor = point - 1, point
        if point in cuts and point > lo:
            steps.append(("versions", lo, point, floor))
            lo = point
    if end > lo:
        steps.append(("versions", lo, end, floor))
    return steps


def _deltas_at(store: MetadataStore, table: TableInfo, seq: int) -> list:
    """The deltas of the partitions a read at `seq` uses (its layout's)."""
    layout = store.layout_at(table.id, seq)
    return [d for d in store.deltas_at(table.id, seq) if d.part in layout.ids]


def _relation(root, table: TableInfo, deltas: list) -> str:
    """The deltas (local copies under `root`) as one DuckDB relation in the current logical schema."""
    files = [str(root / d.path) for d in deltas]
    columns = table.arrow_schema.names
    versions = [d.schema_version for d in deltas]
    added = {c.name: c.added_version for c in table.columns if c.added_version > 1}
    return versioned_source(files, versions, added, columns) if evolved(versions, added) else parquet_source(files)


def _without_time(table: TableInfo) -> pa.Schema:
    schema = change_schema(table)
    return schema.remove(schema.get_field_index(COMMIT_TIMESTAMP))


def _query(table: TableInfo, sql: str) -> pa.Table:
    con = engine.cursor(exact_floats=engine.has_floats(table.arrow_schema))
    try:
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as e:
        raise InternalQueryError(f"cannot read the changes of {table.qualified_name}: {e}") from e
    finally:
        con.close()


def _versions(store: MetadataStore, warehouse: Warehouse, table: TableInfo, lo: int, hi: int,
              floor: int | None) -> pa.Table:
    """The changes of the versions in (lo, hi], each against the key's previous version."""
    deltas = _deltas_at(store, table, lo)
    # The partitions with a version in the range, all their deltas (the older ones hold the
    # preimages): a key's versions live in one partition of a layout.
    changed = {d.part for d in deltas if d.max_seq > lo and d.min_seq <= hi}
    deltas = [d for d in deltas if d.part in changed]
    columns = table.arrow_schema.names
    out_schema = _without_time(table)
    if not deltas:
        return out_schema.empty_table()
    keys = [ident(k) for k in table.key]
    key_list = ", ".join(keys)
    partial = any(d.partial_rows for d in deltas)
    bounds = [f"{ident(SEQ)} <= {int(hi)}"] + ([f"{ident(SEQ)} >= {int(floor)}"] if floor is not None else [])
    order = f"PARTITION BY {key_list} ORDER BY {ident(SEQ)}"
    filled = []
    for i, c in enumerate(columns):
        if not partial or c in table.key:
            filled.append(ident(c))
            continue
        carried = f"CASE WHEN ({ident(UNSET_MASK)} >> {i}) & 1 = 0 THEN struct_pack(v := {ident(c)}) END"
        filled.append(f"(last_value({carried} IGNORE NULLS) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)).v"
                      f" AS {ident(c)}")
    pre = [f"lag({ident(c)}) OVER w AS {ident('_pre_' + c)}" for c in columns]
    value = [ident(c) for c in columns]
    before = [f"{ident('_pre_' + c)} AS {ident(c)}" for c in columns]
    now, was = ident(OP), ident("_pre_op")
    live_before = f"{was} = {OP_UPSERT}"
    with warehouse.local({d.path: d.checksum for d in deltas}) as root:
        source = _relation(root, table, deltas)
        sql = f"""
            WITH v AS (SELECT * FROM {source} WHERE {' AND '.join(bounds)}),
            touched AS (SELECT DISTINCT {key_list} FROM v WHERE {ident(SEQ)} > {int(lo)}),
            history AS (SELECT {', '.join(filled)}, {ident(SEQ)}, {ident(OP)} FROM v SEMI JOIN touched USING ({key_list})),
            paired AS (
                SELECT *, {', '.join(pre)}, lag({ident(OP)}) OVER w AS {was}
                FROM history WINDOW w AS ({order})
            ),
            changed AS (SELECT * FROM paired WHERE {ident(SEQ)} > {int(lo)})
            SELECT {', '.join(value)}, CASE WHEN {live_before} THEN 'update_postimage' ELSE 'insert' END AS {CHANGE_TYPE},
                   {ident(SEQ)} AS {COMMIT_SEQ}
            FROM changed WHERE {now} = {OP_UPSERT}
            UNION ALL
            SELECT {', '.join(before)}, CASE WHEN {now} = {OP_UPSERT} THEN 'update_preimage' ELSE 'delete' END,
                   {ident(SEQ)}
            FROM changed WHERE {live_before}
        """
        rows = _query(table, sql)
    return rows.cast(out_schema)


def reset_to_copy(store: MetadataStore, warehouse: Warehouse, table: TableInfo, window_s: float) -> pa.Table:
    """For a feed whose start lies before the table's copy (copied again since, or started before
    its first copy): a `truncate` marker, then the copy's rows as inserts, at the copy's seq."""
    seq = table.copy_seq
    rows = snapshot_inserts(store, warehouse, table, seq, window_s)
    marker = pa.Table.from_pylist([{CHANGE_TYPE: "truncate", COMMIT_SEQ: seq}], schema=_without_time(table))
    return pa.concat_tables([_with_times(store, table, marker, change_schema(table)), rows])


def snapshot_inserts(store: MetadataStore, warehouse: Warehouse, table: TableInfo, seq: int, window_s: float,
                     pinned_from: int | None = None) -> pa.Table:
    """The table's rows at `seq` as inserts at `seq` (a change feed that starts from a snapshot)."""
    check_range(store, table, seq, seq, window_s, pinned_from)
    rows = _rows_at(store, warehouse, table, seq, store.truncated_at(table.id, seq), "insert", seq)
    return _with_times(store, table, rows, change_schema(table))


def _rows_at(store: MetadataStore, warehouse: Warehouse, table: TableInfo, seq: int, floor: int | None, kind: str,
             commit_seq: int) -> pa.Table:
    """Every row live at `seq`, as changes of type `kind` at `commit_seq` (a truncation at
    seq + 1 deletes them; a snapshot inserts them)."""
    deltas = [d for d in _deltas_at(store, table, seq) if d.min_seq <= seq]
    out_schema = _without_time(table)
    if not deltas:
        return out_schema.empty_table()
    columns = table.arrow_schema.names
    with warehouse.local({d.path: d.checksum for d in deltas}) as root:
        rows_sql = current_rows_sql(_relation(root, table, deltas), list(table.key), columns, columns, seq, floor=floor,
                                    partial=any(d.partial_rows for d in deltas))
        rows = _query(table, f"SELECT *, '{kind}' AS {CHANGE_TYPE}, {int(commit_seq)}::BIGINT AS {COMMIT_SEQ} FROM ({rows_sql})")
    return rows.cast(out_schema)


def _with_times(store: MetadataStore, table: TableInfo, changes: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """Sorted (seq, key, preimage before postimage), with the time each seq became readable."""
    if changes is None or changes.num_rows == 0:
        return schema.empty_table()
    points = store.safe_points_between(table.source, int(pa.compute.min(changes[COMMIT_SEQ]).as_py()),
                                       int(pa.compute.max(changes[COMMIT_SEQ]).as_py()))
    times = pa.table({"seq": pa.array([s for s, _ in points], pa.int64()),
                      "at": pa.array([int(a * 1_000_000) for _, a in points], pa.int64())})
    keys = ", ".join(f"c.{ident(k)}" for k in table.key)
    rank = " ".join(f"WHEN '{t}' THEN {i}" for t, i in _TYPE_ORDER.items())
    con = engine.cursor(exact_floats=engine.has_floats(table.arrow_schema))
    try:
        con.register("c", changes)
        con.register("p", times)
        out = con.sql(
            f"SELECT c.*, make_timestamp(p.at) AS {COMMIT_TIMESTAMP} FROM c ASOF LEFT JOIN p ON c.{COMMIT_SEQ} <= p.seq "
            f"ORDER BY c.{COMMIT_SEQ}, {keys}, CASE c.{CHANGE_TYPE} {rank} END"
        ).to_arrow_table()
    finally:
        con.close()
    return out.cast(schema)
