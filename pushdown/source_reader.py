"""Reading tables from their source with the same pushed plan (failover / fallback).

The plan is rendered by htap.rewrite.render in the source's dialect — the same filters, columns,
joins and aggregates the replica reader would run — and the result streams back as Arrow. Which
database answers, and how, is the source's business (htap.connectors.registry.open_queryable).

A plan with floating point arithmetic is the exception: a source raises where that arithmetic
leaves DOUBLE's range and Spark gives ±Infinity or 0 (htap.rewrite.dialects), so the source
returns the plan's scans' rows and DuckDB computes the plan over them, as on the replica.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Iterator

import duckdb
import pyarrow as pa
from sqlglot import exp

from htap import engine
from htap.conf import SourceConfig
from htap.connectors.queryable import SCAN_TAG, QueryableSource
from htap.connectors.registry import open_queryable
from htap.errors import InternalQueryError, SourceError
from htap.pushdown import partials
from htap.replica.models import TableInfo
from htap.rewrite import render
from htap.rewrite.dialects import REPLICA, computes_floats, plan_computes_floats
from htap.rewrite.pushed import Expr, Literal, PushedPlan, Scan

_BATCH_ROWS = 64 * 1024


# A snapshot name that each reading connection opens for itself, at or after the exported
# position (MySQL/MariaDB `binlog:<seq>`, htap.connectors.mysql.reads): its reads need agreeing.
_OWN_SNAPSHOT_PREFIXES = ("binlog:",)


def reads_own_snapshot(snapshot: str | None) -> bool:
    """Whether each read at `snapshot` opens a snapshot of its own (the source cannot share one
    between connections), so separate scans of one query may see different states."""
    return snapshot is not None and snapshot.startswith(_OWN_SNAPSHOT_PREFIXES)


@dataclass(frozen=True)
class SourceReadAgreement:
    """What a source scan of a query needs to check that it reads the state its query's other
    scans of the source read: MySQL/MariaDB cannot share a snapshot between connections, so each
    separate scan opens its own consistent snapshot, and the query is one state only if they all
    sit at one binlog position. Each scan records its position in the metadata store and fails
    when another scan of the query recorded a different one (MetadataStore.agree_source_read):
    never a silently mixed result. `scan` names the planned scan (its task attempts share it)."""

    metadata: str  # the metadata store, written from the executor (one small record per scan)
    token: str  # the query's snapshot token
    source: str
    scan: str
    what: str  # the tables the scan reads, for the error

    def __call__(self, seq: int) -> None:
        from htap.replica.metadata import MetadataStore
        from htap.seq import format_binlog

        position = format_binlog(seq)
        try:
            with MetadataStore(self.metadata) as store:
                run, attempt = _run_of(self.token)
                others = store.agree_source_read(run, self.source, self.scan, self.what, seq, position, attempt)
        except Exception as e:  # noqa: BLE001 - any failure to record (store unreachable, read-only) is reported
            raise SourceError(
                f"source {self.source}: the query reads {self.what} from the source in a separate scan, whose snapshot must "
                f"be checked against the query's other scans in the metadata store, which failed: {e}. Executors write "
                f"that check to the table query_source_reads of the store they reach (`executor_metadata`): a role that "
                f"may only read the store needs GRANT SELECT, INSERT, UPDATE, DELETE ON query_source_reads"
            ) from e
        if others:
            seen = "; ".join(f"{what} at {pos}" for what, pos in others)
            raise SourceError(
                f"source {self.source}: this query reads {self.what} from the source at {position}, but "
                f"another scan of the same query read {seen}: MySQL/MariaDB cannot share a snapshot between "
                f"connections, so the query's separate scans of the source saw different states (commits came between "
                f"them), and its result would mix them. Re-run the query; or read these tables from the replica "
                f"(`htap failover <table> off`); or let the query push into one scan (spark.htap.wholeQueryPushdown and "
                f"spark.sql.optimizer.datasourceV2JoinPushdown on), which the source answers as one statement"
            )


def _run_of(token: str) -> tuple[str, str]:
    """(run, attempt): the query's token with the Spark execution running this task
    (`spark.sql.execution.id`, one per action: running the same planned query again, `collect()`
    twice on one DataFrame, keeps its scans and token but is another run, whose scans must agree
    among themselves only), and this task attempt's id (retries and speculative copies differ)."""
    run, attempt = None, None
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            run = ctx.getLocalProperty("spark.sql.execution.id")
            attempt = str(ctx.taskAttemptId())
    except Exception:  # noqa: BLE001 - outside a Spark task: the token alone, a fresh attempt
        pass
    return (f"{token}/{run}" if run else token), attempt or uuid.uuid4().hex


def read_source(
    source: SourceConfig, tables: list[TableInfo], plan: PushedPlan, output: pa.Schema, snapshot: str | None = None,
    agreement: SourceReadAgreement | None = None,
) -> Iterator[pa.RecordBatch]:
    """The plan (`tables[k]`: scan k's table) as one query of the source: one statement, one
    snapshot; other scans of the query may still read the source separately, hence `agreement`."""
    queryable = open_queryable(source)
    agree = {"agree": agreement} if agreement is not None and reads_own_snapshot(snapshot) else {}
    if plan_computes_floats(plan):
        return _computed_here(queryable, tables, plan, output, snapshot, agree)
    return queryable.read(tables, plan, output, snapshot, **agree)


def _computed_here(
    queryable: QueryableSource, tables: list[TableInfo], plan: PushedPlan, output: pa.Schema, snapshot: str | None,
    agree: dict,
) -> Iterator[pa.RecordBatch]:
    """The plan computed by DuckDB over its scans' rows, which the source returns in one
    statement (QueryableSource.render_rows: one snapshot, as the plan's own query would have
    been). The source still applies each scan's conjuncts without floating point arithmetic;
    DuckDB applies the others and computes everything above the scans, as the replica does."""
    here: list[tuple[Expr, ...]] = []
    there: list[Scan] = []
    for scan in plan.scans:
        local = tuple(c for c in scan.filter if computes_floats(c))
        needed = sorted(set().union(*(c.columns() for c in local)) - set(scan.columns))
        there.append(Scan(scan.table, tuple(scan.columns) + tuple(needed),
                          tuple(c for c in scan.filter if not computes_floats(c))))
        here.append(local)
    fields = [t.arrow_schema.field(c) for t, s in zip(tables, there) for c in s.columns]
    schema = pa.schema([pa.field(SCAN_TAG, pa.int32())] + [pa.field(f"c{j}", f.type) for j, f in enumerate(fields)])
    what = " JOIN ".join(dict.fromkeys(t.qualified_name for t in tables))
    failed: list[BaseException] = []  # the source's own error, which DuckDB would only quote

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from queryable.read_query(queryable.render_rows(tables, there), schema, snapshot, what=what, **agree)
        except BaseException as e:
            failed.append(e)
            raise

    rows = pa.RecordBatchReader.from_batches(schema, batches())
    con = engine.cursor(exact_floats=True)
    try:
        # materialized: a stream can be scanned once, and DuckDB may scan a relation more than
        # once even for one scan (a plan of several scans reads the rows once per scan; one with
        # a SUM(DISTINCT) beside a COUNT(DISTINCT) scans its one input twice: fuzz seed 21 query 1)
        con.register("__source_rows", rows.read_all())
        relations, first = [], 0
        for k, (scan, read) in enumerate(zip(plan.scans, there)):
            outputs = [exp.column(f"c{first + j}", quoted=True).as_(c, quoted=True) for j, c in enumerate(read.columns)]
            first += len(read.columns)
            rows_k = (exp.select(*(outputs or [exp.Literal.number(1).as_(render.ROW, quoted=True)]))
                      .from_("__source_rows").where(exp.column(SCAN_TAG, quoted=True).eq(k)))
            relations.append(render.scan_select(dataclasses.replace(scan, filter=here[k]), rows_k.subquery(f"r{k}")))
        sql = render.render_plan(plan, relations).sql(REPLICA)
        for batch in con.sql(sql).to_arrow_reader(_BATCH_ROWS):
            yield from partials.fit(batch, plan, output)
    except (duckdb.Error, pa.ArrowException) as e:
        if failed:
            raise failed[0] from None
        raise InternalQueryError(
            f"computing a failed-over plan of {what} over the source's rows failed (a spark-htap bug; please report"
            f" it with this line): {str(e).splitlines()[0]}"
        ) from e
    finally:
        con.close()


def check_access(source: SourceConfig, user: str, table: TableInfo, columns: list[str]) -> str | None:
    """None if the source user may read those columns, else the reason (the replica never widens access)."""
    return open_queryable(source).check_select(user, table, columns)


def key_range_conjuncts(column: str, t: pa.DataType, low, high) -> tuple[Expr, ...]:
    """`low <= column < high` as pushed-plan conjuncts (None: unbounded) over a key column of
    Arrow type `t`: integers (16 to 64 bits, as the replica stores them), dates, or anything else
    compared as its text (what `split_points` gives). Key ranges of parallel source reads, and a
    co-partitioned table's part of a split task."""
    if pa.types.is_int16(t) or pa.types.is_int32(t) or pa.types.is_int64(t):
        literal_type, spark_type = "long", {16: "smallint", 32: "int", 64: "bigint"}[t.bit_width]
    elif pa.types.is_date32(t):
        literal_type, spark_type = "date", "date"
    else:
        literal_type, spark_type = "string", "string"
    out = []
    for edge, op in ((low, ">="), (high, "<")):
        if edge is not None:
            value = int(edge) if literal_type == "long" else edge.isoformat() if literal_type == "date" else str(edge)
            bound = Expr.literal(Literal(literal_type, value), spark_type)
            out.append(Expr.call(op, "boolean", Expr.column(column, spark_type), bound))
    return tuple(out)


def source_ranges(source: SourceConfig, table: TableInfo, plan: PushedPlan, range_rows: int) -> list[PushedPlan]:
    """The plan (of one scan) once per key range of the source's table: [first, b1), [b1, b2),
    ..., [bk, last] on the first key column. Read in parallel, the ranges must share one source
    snapshot (the caller only splits when one is exported)."""
    points = open_queryable(source).split_points(table, range_rows)
    if not points:
        return [plan]
    key0 = table.key[0]
    t = table.arrow_schema.field(key0).type
    edges = [None, *points, None]
    return [plan.with_filter(0, key_range_conjuncts(key0, t, lo, hi)) for lo, hi in zip(edges, edges[1:])]
