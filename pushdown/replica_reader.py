"""Merge-on-read of a replica table at one snapshot seq, then the pushed plan, in DuckDB.

Versions of all deltas with `floor <= _seq <= snapshot` are collapsed per key (latest version
wins; a delete hides the row; columns a partial update did not carry come from the key's newest
older version that has them), then the pushed filters, projection and partial aggregation run
on the result — one vectorized DuckDB query, streamed out as Arrow record batches. Filters that
touch only key columns are applied before the collapse (every version of a key shares them), so
point and range lookups by key skip most of the work.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Callable, Iterator, Mapping

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from htap import engine
from htap.errors import InternalQueryError, QueryValueError
from htap.pushdown import partials
from htap.replica import dv
from htap.replica.health import damaged, first_damage
from htap.replica.merge import current_rows_sql, evolved, ident, parquet_source, versioned_source
from htap.replica.models import OP, ORD, SEQ, UNSET_MASK, delta_schema
from htap.replica.read_plans import ReadPlan
from htap.replica.tail import fetch as fetch_tail
from htap.replica.warehouse import Warehouse, as_warehouse
from htap.rewrite import render
from htap.rewrite.dialects import DIVIDE_BY_ZERO_MESSAGE, REPLICA
from htap.rewrite.pushed import Expr, PushedPlan, Scan

BATCH_ROWS = 64 * 1024


def replica_sql(
    files: list[str] | str,
    key: list[str],
    all_columns: list[str],
    seq: int,
    plan: PushedPlan,
    *,
    floor: int | None = None,
    partial: bool = False,
    strategy: str = "merge",
    seq_filter: bool = True,
    deletes: bool = True,
) -> str:
    """The DuckDB query that reads the versions in `files` (or a registered relation's name) at
    `seq` and applies `plan` (of one scan: this table's). `strategy`, `seq_filter` and `deletes`
    (see htap.replica.read_plans.ReadPlan) avoid the general per-key merge and filters that cannot
    drop a row when the deltas' shape allows it. The scan's conjuncts on key columns only are
    applied before the collapse (every version of a key shares them), the others after."""
    (scan,) = plan.scans
    keyed, rest = key_conjuncts(scan, key)
    needed = scanned_columns(all_columns, key, scan, strategy)
    conditions = [render.expr(f).sql(REPLICA) for f in keyed]
    latest = current_rows_sql(files, key, all_columns, needed, seq, floor=floor, partial=partial, strategy=strategy,
                              key_conditions=conditions, seq_filter=seq_filter, deletes=deletes)
    # The current rows enter as a placeholder table replaced by their SQL text: parsing that text
    # back into sqlglot (and the deep copy that came with it) was half of a point lookup's time.
    rows = render.scan_select(scan, exp.table_(_CURRENT).as_("cur"), rest)
    outer = render.render_plan(plan, [rows]).sql(REPLICA)
    places = outer.count(_CURRENT)
    if places == 1:
        return outer.replace(_CURRENT, f"({latest})")
    if places == 0 or outer.lstrip().upper().startswith("WITH"):
        raise InternalQueryError(f"the replica query has {places} places for its current rows: {outer}")
    # A plan that reads its rows more than once (ROLLUP's Expand renders one SELECT per grouping
    # set: fuzz seed 34 queries 127, 149, 232): the current rows are computed once, by name.
    return f"WITH {_CURRENT} AS ({latest}) {outer}"


def key_conjuncts(scan: Scan, key: list[str]) -> tuple[list[Expr], list[Expr]]:
    """The scan's filter split in (conjuncts over key columns only, the others)."""
    keyed = [f for f in scan.filter if f.columns() and f.columns() <= set(key) and not f.subqueries()]
    return keyed, [f for f in scan.filter if f not in keyed]


def scanned_columns(all_columns: list[str], key: list[str], scan: Scan, strategy: str) -> list[str]:
    """The table columns a partition read scans for `scan`: the ones it references, plus the
    key for a per-key merge (a "direct" read, one version per key, needs the key only if the
    scan does; a read of no column still selects one: no dialect selects nothing)."""
    wanted = scan.referenced()
    if strategy == "direct":
        return [c for c in all_columns if c in wanted] or [key[0]]
    return [c for c in all_columns if c in wanted or c in key]


# Stands for the current rows' subquery in replica_sql's outer query (no column or table is named so).
_CURRENT = "__htap_current_rows__"


def read_replica(
    warehouse: Warehouse | Path,
    table_label: str,
    table_schema: pa.Schema,
    key: list[str],
    delta_paths: list[str],
    seq: int,
    plan: PushedPlan,
    output_schema: pa.Schema,
    *,
    floor: int | None = None,
    partial: bool = False,
    strategy: str = "merge",
    delta_versions: list[int] | None = None,
    added_versions: dict[str, int] | None = None,
    files: Mapping[str, str | None] | None = None,
    seq_filter: bool = True,
    deletes: bool = True,
    tail: pa.Table | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the plan's result over the table's current rows at `seq`, cast to `output_schema`.
    `tail`: versions newer than every delta's, from the service's in-memory tail (htap.replica.tail).

    `delta_versions` (the schema version of each file) and `added_versions` (columns added after
    version 1) let deltas written under older logical schemas be read under the current one.
    `files` (relative path -> checksum) names every file to fetch from an object store, sidecars
    included; by default the deltas and their possible sidecars, unverified."""
    warehouse = as_warehouse(warehouse)
    if files is None:
        files = {name: None for p in delta_paths for name in (p, dv.sidecar(p))}
    with warehouse.local(files) as root:
        con = engine.cursor(exact_floats=engine.has_floats(table_schema))
        try:
            sql, local = partition_query(
                con, root, warehouse, table_label, table_schema, key, delta_paths, seq, plan, floor=floor,
                partial=partial, strategy=strategy, delta_versions=delta_versions, added_versions=added_versions,
                seq_filter=seq_filter, deletes=deletes, tail=tail,
            )
            yield from _run(con, sql, output_schema, plan, {table_label: local})
        finally:
            con.close()


def partition_query(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    warehouse: Warehouse,
    table_label: str,
    table_schema: pa.Schema,
    key: list[str],
    delta_paths: list[str],
    seq: int,
    plan: PushedPlan,
    *,
    floor: int | None,
    partial: bool,
    strategy: str,
    delta_versions: list[int] | None,
    added_versions: dict[str, int] | None,
    name: str = "__visible",
    vectors: Callable[[], dv.Vectors | None] | None = None,
    seq_filter: bool = True,
    deletes: bool = True,
    tail: pa.Table | None = None,
) -> tuple[str, list[str]]:
    """The DuckDB query of one partition read at `seq` with `plan` (of this table's one scan) applied, over local copies
    of the files (`<root>/<relative path>`), and those local files. `con` may get temporary views
    and relations named after `name` (unique per partition read of one query). `vectors`: the
    deletion vectors of this and the query's other partitions, loaded once on first call. `tail`:
    newer versions than every delta's (htap.replica.tail), read as the newest delta."""
    files = [str(root / p) for p in delta_paths]
    for p, f in zip(delta_paths, files):
        if not Path(f).is_file():
            raise damaged(table_label, f"delta file {warehouse.url(p)} is missing")
    if tail is not None and tail.num_rows:
        source, has_partial = _versions_with_tail(con, files, tail, key, table_schema, delta_versions, added_versions, name)
        sql = replica_sql(source, key, table_schema.names, seq, plan, floor=floor, partial=partial or has_partial)
        return sql, files
    if files and evolved(delta_versions, added_versions):
        source: list[str] | str = versioned_source(files, delta_versions, added_versions, table_schema.names)
        strategy = "merge"
    elif files:
        source = files
        if strategy != "direct" and not key_conjuncts(plan.scans[0], key)[0]:
            # Deletion vectors: filtered scans of each delta instead of a per-key merge. (Lookups
            # by key keep the merge: it prunes row groups and collapses only the keys asked for.)
            needed = scanned_columns(table_schema.names, key, plan.scans[0], "direct")
            visible = dv.visible_source(con, root, delta_paths, seq, needed, name, vectors() if vectors else None)
            if visible is not None:
                try:
                    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {visible}")  # this cursor's own
                    source, strategy = name, "direct"
                except duckdb.Error:
                    pass  # a file went bad since it was checked: the merge reports it
    else:
        empty = f"{name}_no_deltas"
        con.register(empty, pa.Table.from_batches([], schema=delta_schema(table_schema)))
        source, strategy = empty, "merge"
    sql = replica_sql(source, key, table_schema.names, seq, plan, floor=floor, partial=partial, strategy=strategy,
                      seq_filter=seq_filter, deletes=deletes)
    return sql, files


def _versions_with_tail(con: duckdb.DuckDBPyConnection, files: list[str], tail: pa.Table, key: list[str],
               table_schema: pa.Schema, delta_versions: list[int] | None, added_versions: dict[str, int] | None,
               name: str) -> tuple[str, bool]:
    """The partition's versions as one relation for the per-key merge: the deltas' and the tail's
    (registered as `<name>_tail`; of several versions of a key in one transaction, the last, as a
    checkpoint keeps it: htap.replica.deltas), and whether some tail row is partial."""
    missing = [c for c in (*table_schema.names, SEQ, OP, UNSET_MASK, ORD) if c not in tail.column_names]
    if missing:
        raise InternalQueryError(f"the service's tail lacks columns {missing} (its schema: {tail.column_names})")
    con.register(f"{name}_tail", tail)
    keys = ", ".join(ident(k) for k in key)
    cols = ", ".join(ident(c) for c in (*table_schema.names, SEQ, OP, UNSET_MASK))
    newest = (f"SELECT {cols} FROM {name}_tail QUALIFY row_number() OVER (PARTITION BY {keys}, {ident(SEQ)}"
              f" ORDER BY {ident(ORD)} DESC) = 1")
    parts = [newest]
    if files and evolved(delta_versions, added_versions):
        parts.insert(0, f"SELECT * FROM {versioned_source(files, delta_versions, added_versions, table_schema.names)}")
    elif files:
        parts.insert(0, f"SELECT {cols} FROM {parquet_source(files)}")
    has_partial = pc.any(pc.not_equal(tail.column(UNSET_MASK), 0)).as_py() or False
    return "(" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", has_partial


def _run(con, sql: str, output_schema: pa.Schema, plan: PushedPlan, files: dict[str, list[str]]) -> Iterator[pa.RecordBatch]:
    """Run `sql` and stream its batches as `output_schema`; a failure is damage only if a file of
    some table (`files`: table label -> its local files) is missing or corrupt."""
    try:
        reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
        for batch in reader:
            yield from _conform(batch, output_schema, plan)
    except duckdb.Error as e:
        raise _failure(e, files) from e


def _failure(error: duckdb.Error, files: dict[str, list[str]]) -> Exception:
    """What a failed replica query (or a view binding its files) means: damage only if a file of
    some table is missing or corrupt; on intact files, an overflow or the ANSI division by zero
    is the data's (pushed arithmetic raises where Spark's ANSI mode does), anything else is our
    own query failing: a bug, not damage."""
    for label, table_files in files.items():
        problem = first_damage(table_files)
        if problem:
            return damaged(label, problem)
    line = str(error).splitlines()[0]
    by_zero = DIVIDE_BY_ZERO_MESSAGE in line
    # (a value cast to a narrower type: a split aggregate's partial BIGINT SUM outside BIGINT's
    # range, where Spark's own running sum overflows too: fuzz seed 42 query 1362)
    out_of_range = isinstance(error, duckdb.ConversionException) and "out of range" in line
    if by_zero or out_of_range or isinstance(error, duckdb.OutOfRangeException):
        condition = "DIVIDE_BY_ZERO" if by_zero else "ARITHMETIC_OVERFLOW"  # Spark's names
        return QueryValueError(
            f"[{condition}] the replica query of {', '.join(files)} raised on a value of the data, as Spark's"
            f" ANSI mode does over the same rows: {line}. Spark's try_ functions (try_add, try_sum, try_divide, ...)"
            " or a wider type tolerate it"
        )
    return InternalQueryError(
        f"the replica query of {', '.join(files)} failed on intact files (a spark-htap bug; please report it"
        f" with this line): {line}"
    )


@dataclasses.dataclass(frozen=True)
class JoinedTableRead:
    """One table of a joined scan as a task reads it: the partitions it reads at the seq."""

    label: str
    schema: pa.Schema
    key: list[str]
    plans: tuple[ReadPlan, ...]


def _shared_vectors(root: Path, plans: tuple[ReadPlan, ...]) -> Callable[[], dv.Vectors | None] | None:
    """The deletion vectors of every partition a task reads of one table, loaded once when the
    first partition needs them (a one-task scan of a table with P partitions). None for a single
    partition or mixed seqs."""
    if len(plans) < 2 or len({plan.seq for plan in plans}) != 1:
        return None
    paths = [p for plan in plans for p in plan.delta_paths]
    return functools.cache(lambda: dv.load(root, paths, plans[0].seq))


def _as_one_read(
    plans: tuple[ReadPlan, ...], key: list[str], scan: Scan, vectors: Callable[[], dv.Vectors | None] | None
) -> ReadPlan | None:
    """The partitions a task reads of one table as one read of all their deltas, when each
    partition's rows at the seq come from per-row visibility alone — every partition read
    "direct" (one version per key), or every delta with trustworthy deletion vectors and no key
    filter (which would take the per-key merge) — so reading the union of the partitions equals
    the union of their reads (their key ranges are disjoint; a scan's rows are per row). A scan
    per kind of delta instead of one per partition and delta: each scan in a UNION ALL costs
    about as much as reading 100k rows. None otherwise."""
    if vectors is None:
        return None  # `vectors` is None exactly when the plans differ in seq or are fewer than two
    first = plans[0]
    if any(p.floor != first.floor or p.partial or evolved(list(p.delta_versions), dict(p.added_versions)) for p in plans):
        return None
    paths = tuple(path for p in plans for path in p.delta_paths)
    versions = tuple(v for p in plans for v in p.delta_versions)
    if len(set(versions)) > 1:
        return None  # partitions written under different schema versions: each reads its own
    if all(p.strategy == "direct" for p in plans):
        strategy = "direct"
    elif key_conjuncts(scan, key)[0]:
        return None
    else:
        loaded = vectors()
        if loaded is None or loaded.hidden(list(paths)) is None:
            return None
        strategy = "merge"  # partition_query reads it through the deletion vectors
    # A filter one partition needs is the union's (a partition's own plan may leave out the
    # `_seq` or `_op` filter that could not drop any of its rows: not so for the others').
    return dataclasses.replace(first, delta_paths=paths, strategy=strategy, delta_versions=versions, files=(),
                               seq_filter=any(p.seq_filter for p in plans), deletes=any(p.deletes for p in plans))


def _plan_files(plan: ReadPlan) -> dict[str, str | None]:
    if plan.files:
        return dict(plan.files)
    return {name: None for p in plan.delta_paths for name in (p, dv.sidecar(p))}


def read_joined(
    warehouse: Warehouse | Path, tables: list[JoinedTableRead], plan: PushedPlan, output_schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """A task reading several partitions in one DuckDB query (a joined scan, a whole subtree, or a
    single table's scan in one task): each scan's rows at the seq (its partitions' reads, its
    filter and columns applied) as a temporary view, then the plan over them
    (htap.rewrite.render). `tables[k]` holds what this task reads of scan k's table."""
    if len(tables) != len(plan.scans):
        raise InternalQueryError(f"a task of {len(tables)} table reads for a plan of {len(plan.scans)} scans")
    warehouse = as_warehouse(warehouse)
    needed: dict[str, str | None] = {}
    for t in tables:
        for p in t.plans:
            needed.update(_plan_files(p))
    with warehouse.local(needed) as root:
        con = engine.cursor(exact_floats=any(engine.has_floats(t.schema) for t in tables))
        files: dict[str, list[str]] = {}
        try:
            views = []
            for i, (t, scan) in enumerate(zip(tables, plan.scans)):
                rows = plan.rows_of(i)
                parts = []
                vectors = _shared_vectors(root, t.plans)
                tails = [fetch_tail(read.tail) if read.tail else None for read in t.plans]
                newer = any(tail is not None and tail.num_rows for tail in tails)
                combined = None if newer else _as_one_read(t.plans, t.key, scan, vectors)
                reads = [(combined, None)] if combined is not None else list(zip(t.plans, tails))
                for j, (read, tail) in enumerate(reads):
                    sql, local = partition_query(
                        con, root, warehouse, t.label, t.schema, t.key, list(read.delta_paths), snapshot_of(read),
                        rows, floor=read.floor, partial=read.partial, strategy=read.strategy,
                        delta_versions=list(read.delta_versions), added_versions=dict(read.added_versions),
                        name=f"__visible_{i}_{j}", vectors=vectors, seq_filter=read.seq_filter, deletes=read.deletes,
                        tail=tail,
                    )
                    parts.append(f"({sql})")
                    files.setdefault(t.label, []).extend(local)
                if not parts:  # every partition pruned by the scan's own key filters
                    fields = [t.schema.field(c) for c in scan.columns] or [pa.field(render.ROW, pa.int32())]
                    con.register(f"__empty_{i}", pa.Table.from_batches([], schema=pa.schema(fields)))
                    parts.append(f"(SELECT * FROM __empty_{i})")
                try:  # binding the view reads the files' footers: a corrupt one fails here, not in _run
                    con.execute(f"CREATE OR REPLACE TEMP VIEW __table_{i} AS {' UNION ALL '.join(parts)}")
                except duckdb.Error as e:
                    raise _failure(e, files) from e
                views.append(exp.to_table(f"__table_{i}"))
            sql = render.render_plan(plan, views).sql(REPLICA)
            yield from _run(con, sql, output_schema, plan, files)
        finally:
            con.close()


def _conform(batch: pa.RecordBatch, schema: pa.Schema, plan: PushedPlan) -> Iterator[pa.RecordBatch]:
    """Rename to the output names and cast to the exact types Spark expects (decimal partial sums
    split to fit theirs, see htap.pushdown.partials)."""
    if len(schema) == 0:
        yield batch.select([])  # the rows, without columns (see replica_sql)
        return
    if batch.num_columns != len(schema):
        raise InternalQueryError(f"replica query returned {batch.num_columns} columns, Spark expects {len(schema)}")
    yield from partials.fit(batch, plan, schema)


def read_plan(
    warehouse: Warehouse | Path,
    table_label: str,
    table_schema: pa.Schema,
    key: list[str],
    plan: ReadPlan,
    pushed: PushedPlan,
    output_schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """`read_replica` for one partition's read plan (htap.replica.read_plans.ReadPlan)."""
    return read_replica(
        warehouse, table_label, table_schema, key, list(plan.delta_paths), snapshot_of(plan), pushed, output_schema,
        floor=plan.floor, partial=plan.partial, strategy=plan.strategy,
        delta_versions=list(plan.delta_versions), added_versions=dict(plan.added_versions),
        files=dict(plan.files) if plan.files else None, seq_filter=plan.seq_filter, deletes=plan.deletes,
        tail=fetch_tail(plan.tail) if plan.tail else None,
    )


def snapshot_of(plan: ReadPlan) -> int:
    """The seq a partition read answers at: its deltas' seq, or its tail's end."""
    return plan.tail.high if plan.tail else plan.seq
