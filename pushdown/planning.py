"""Planning a scan's read on the driver: its route, the query's snapshot, the leases, the routing
record (all from ONE metadata transaction) and the tasks executors run (`plan_partitions`, the
typed partitions they only read).

Before, a scan read its table, then (after the `user` option's round trip to the source) fixed
the query's snapshot from fresher metadata, then judged its window from the older read: a
checkpoint in between put the snapshot outside the stale window, and the scan errored
(route=replica) or silently read the source *now* while the query's other tables read the
replica at the snapshot (route=auto). Now every metadata read and write of a scan is one
transaction, and the query's first scan on a source decides for all of the query's tables of
that source:

- all can be read from the replica: the query's snapshot is the minimum of their max safe
  seqs, and every scan reads the replica there;
- any must be read from the source (failover, unhealthy, stale, not yet copied): every table
  of that source in the query reads from the source, at one exported source snapshot
  (htap.pushdown.source_snapshot); a later scan whose replica cannot serve the fixed seq errors.

Never a mix of snapshots.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pyspark.sql.datasource import InputPartition

from htap.errors import HtapError, NoSuchTableError
from htap.pushdown.datasource import NO_SUCH_TABLE_MARKER, PERMISSION_MARKER, READ_AFTER_NOW, open_scan
from htap.pushdown.routing import ROUTE_AUTO, ROUTE_REPLICA, ROUTE_SOURCE, Route, RoutingError, decide
from htap.replica.metadata import QUERY_READS_SOURCE, MetadataStore
from htap.replica.models import KIND_VIEW, STATE_STREAMING, TableInfo
from htap.replica.read_plans import ReadPlan, pin_and_plan, queryable_window, seq_for_time
from htap.replica.tail import TailPin, TailRead, TailUnavailable, service_tail
from htap.replica.tail import pin as tail_pin
from htap.replica.tail import release as release_tail
from htap.rewrite.pushed import Scan

if TYPE_CHECKING:
    from htap.pushdown.datasource import ScanOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanRequest:
    source: str
    schema: str
    table: str
    mode: str  # auto | replica | source
    as_of_seq: int | None = None
    as_of_time: float | None = None
    source_snapshot: str | None = None  # given by the caller (the verifier)
    snapshot_token: str | None = None  # the query's, from the snapshot strategy
    snapshot_tables: tuple[str, ...] = ()  # the query's HTAP tables, catalog.schema.table
    warehouse_problem: str | None = None  # why the replica cannot be read now (unreachable, behind readAfter)
    note: str | None = None  # added to the routing record's reason (what readAfter asked, how long it waited)
    tail: str | None = None  # a pin of the source's in-memory tail (htap.replica.tail.TailPin JSON), readTail
    tail_owner: str | None = None  # who releases that pin with its leases (the scan's lease owner)


@dataclass(frozen=True)
class ScanPlan:
    table: TableInfo
    route: Route
    reads: tuple[ReadPlan, ...] = ()  # replica reads, one per partition
    source_snapshot: str | None = None  # source reads: the exported snapshot to read at


class _NeedsExport(HtapError):
    """The query must read a source itself and no snapshot of it is exported yet (a signal inside
    plan_scans, which catches it: it never reaches a caller)."""


def plan_scan(
    store: MetadataStore,
    req: ScanRequest,
    scan: Scan,
    record: dict,
    *,
    window_s: float,
    pin_ttl_s: float,
    export: Callable[[], str],
    now: Callable[[], float] = time.time,
    holder: str | None = None,
) -> ScanPlan:
    """Route and pin one scan in one metadata transaction. `export` exports a source snapshot
    (called outside the transaction, only when the query reads the source and has none yet).
    `holder`: who holds the scan's leases (the Spark driver, for the query; see
    htap.replica.leases). `record`: the pushed plan as the routing record keeps it."""
    return plan_scans(store, [req], [scan], record, window_s=window_s, pin_ttl_s=pin_ttl_s, export=export, now=now,
                      holder=holder)[0]


def plan_scans(
    store: MetadataStore,
    reqs: list[ScanRequest],
    scans: list[Scan],
    record: dict,
    *,
    window_s: float,
    pin_ttl_s: float,
    export: Callable[[], str],
    now: Callable[[], float] = time.time,
    holder: str | None = None,
) -> list[ScanPlan]:
    """Route and pin the tables of one scan (several when joins were pushed into it) in one
    metadata transaction: every table is pinned and its route recorded there. A joined scan is
    one query, so its tables all read the replica at one seq or all the source in one statement
    (at the query's exported snapshot when it has one) — never a mix. `scans[i]` is what the
    plan reads of `reqs[i]`'s table (its filter prunes partitions); `record` is the pushed plan
    every table's routing record keeps."""
    exported = None
    for _ in range(2):
        try:
            # Not synced: everything written here (the query's snapshot, the leases, the routing
            # record) lives as long as the query, which a crash ends too; a sync per scan cost a
            # few ms of every query's planning.
            with store.transaction(durable=False):
                tables = [store.get_table(r.source, r.schema, r.table) for r in reqs]
                routed = [_route(store, r, t, window_s, now(), exported) for r, t in zip(reqs, tables)]
                if len({route.target for route, _ in routed}) > 1:
                    # No query snapshot decided for all (a lone scan): one source statement reads them all.
                    why = next(route.reason for route, _ in routed if route.target == ROUTE_SOURCE)
                    snapshot = next((s for route, s in routed if route.target == ROUTE_SOURCE), None)
                    routed = [
                        (route if route.target == ROUTE_SOURCE else
                         Route(ROUTE_SOURCE, None, f"a table joined with it must come from the source ({why})"), snapshot)
                        for route, _ in routed
                    ]
                seqs = {route.seq for route, _ in routed if route.target == ROUTE_REPLICA}
                if len(seqs) > 1:  # lone scans (no query snapshot) of several tables: their common seq
                    common = min(seqs)
                    routed = [(Route(route.target, common, route.reason), s) for route, s in routed]
                notes = [r.note for r in reqs]
                routed = [(Route(route.target, route.seq, f"{route.reason}; {note}") if note else route, s)
                          for (route, s), note in zip(routed, notes)]
                plans = []
                recorded = set()
                for req, table, (route, snapshot), scan in zip(reqs, tables, routed, scans):
                    reads: tuple[ReadPlan, ...] = ()
                    if route.target == ROUTE_REPLICA and route.seq > table.max_safe_seq:  # in the tail (_route)
                        pin = TailPin.from_json(store.query_tail(req.snapshot_token, req.source))
                        durable = pin_and_plan(store, table, table.max_safe_seq, window_s, pin_ttl_s, scan.filter, holder)
                        reads = with_tail(store, durable, table, pin, route.seq)
                    elif route.target == ROUTE_REPLICA:
                        reads = tuple(pin_and_plan(store, table, route.seq, window_s, pin_ttl_s, scan.filter, holder))
                    if table.id not in recorded:  # a table read twice (a self-join) is one record
                        store.record_scan(table.id, route.target, route.seq, record, route.reason)
                        recorded.add(table.id)
                    plans.append(ScanPlan(table, route, reads, snapshot))
                return plans
        except _NeedsExport:
            exported = export()  # a round trip to the source: never inside the transaction
    names = ", ".join(f"{r.schema}.{r.table}" for r in reqs)
    raise RoutingError(f"{names}: no source snapshot could be fixed for the query")  # pragma: no cover


def _route(
    store: MetadataStore, req: ScanRequest, table: TableInfo, window_s: float, now: float, exported: str | None
) -> tuple[Route, str | None]:
    as_of = req.as_of_seq
    if as_of is None and req.as_of_time is not None:
        as_of = seq_for_time(store, table, req.as_of_time)
    if as_of is not None or not req.snapshot_token:
        # Time travel (every scan of the query asks the same seq), or a lone scan without the
        # snapshot strategy: this table decides alone.
        route = decide(table, queryable_window(store, table, window_s), now, mode=req.mode, as_of=as_of,
                       unavailable=req.warehouse_problem)
        return route, req.source_snapshot if route.target == ROUTE_SOURCE else None
    fixed = store.fixed_query_snapshot(req.snapshot_token, req.source)
    if fixed is None:
        fixed = _fix_query_snapshot(store, req, window_s, now, exported)
    if fixed == QUERY_READS_SOURCE:
        snapshot = store.query_source_snapshot(req.snapshot_token, req.source)
        own = decide(table, queryable_window(store, table, window_s), now, mode=ROUTE_AUTO, unavailable=req.warehouse_problem)
        why = own.reason if own.target == ROUTE_SOURCE else "another table of its source in the query must come from the source"
        return Route(ROUTE_SOURCE, None, f"{why}; the query reads every table of this source there, at one snapshot"), snapshot
    window = queryable_window(store, table, window_s)
    if window is not None and fixed > window.max_seq:
        pinned = store.query_tail(req.snapshot_token, req.source)
        if pinned is not None and tail_snapshot(TailPin.from_json(pinned), [table]) >= fixed:
            return Route(ROUTE_REPLICA, fixed, f"replica healthy and fresh (the query's snapshot, {fixed - window.max_seq}"
                         f" past the durable seq {window.max_seq}: read from the service's in-memory tail)"), None
    if window is None or not window.min_seq <= fixed <= window.max_seq:
        problem = f"the replica is {table.state}" if window is None else f"its window is [{window.min_seq}, {window.max_seq}]"
        raise RoutingError(
            f"{table.qualified_name}: the query reads its source's tables at replica seq {fixed}, but {problem};"
            " re-run the query"
        )
    return Route(ROUTE_REPLICA, fixed, "replica healthy and fresh (the query's snapshot)"), None


def _fix_query_snapshot(store: MetadataStore, req: ScanRequest, window_s: float, now: float, exported: str | None) -> int:
    """The first scan of a query on a source: where every table of that source in the query reads."""
    tables = query_tables(store, req.source, req.snapshot_tables, [(req.schema, req.table)])
    seqs = [t.max_safe_seq for t in tables if t.readable and not t.failover]
    candidate = min(seqs) if seqs else None
    routes = [decide(t, queryable_window(store, t, window_s), now, mode=req.mode, snapshot=candidate,
                     unavailable=req.warehouse_problem) for t in tables]
    if all(r.target == ROUTE_REPLICA for r in routes):
        if req.tail is not None and candidate is not None:
            fresher = tail_snapshot(TailPin.from_json(req.tail), tables)
            if fresher > candidate:
                return store.fix_query_tail(req.snapshot_token, req.source, req.tail_owner or "", fresher, req.tail)
        return store.query_snapshot(req.snapshot_token, req.source, candidate)
    # Even a query of one table may scan it twice (self-join, UNION ALL): always one snapshot.
    snapshot = req.source_snapshot or exported
    if snapshot is None:
        raise _NeedsExport()
    store.fix_query_source_snapshot(req.snapshot_token, req.source, snapshot)
    return store.fixed_query_snapshot(req.snapshot_token, req.source)  # another scan may have been first


def tail_snapshot(pin: TailPin, tables: list[TableInfo]) -> int:
    """The newest seq all `tables` can be read at through `pin`: deltas up to each table's max
    safe seq, the pinned tail above it. 0 when some table cannot be (not streaming, failed over,
    not followed by the service, or durable below what the pin holds: then the tail misses rows)."""
    if not all(t.state == STATE_STREAMING and not t.failover and (t.max_safe_seq or 0) >= pin.durable for t in tables):
        return 0
    return pin.snapshot([t.id for t in tables])


def with_tail(store: MetadataStore, reads: list[ReadPlan], table: TableInfo, pin: TailPin, seq: int) -> tuple[ReadPlan, ...]:
    """Partition reads of the deltas at the table's max safe seq, each completed to `seq` by the
    pinned tail's rows of its partition above it."""
    layout = store.layout_at(table.id, table.max_safe_seq)
    return tuple(dataclasses.replace(read, tail=TailRead(
        pin.endpoint, pin.secret, pin.ticket, table.id, table.max_safe_seq, seq, table.key[0], layout.bounds_b64,
        layout.ids.index(read.part))) for read in reads)


def query_tables(store: MetadataStore, source: str, names: tuple[str, ...], own: list[tuple[str, str]]) -> list[TableInfo]:
    """The query's HTAP tables of `source` (`names`: catalog.schema.table, from the snapshot
    strategy; tables of other catalogs or sources skipped) and the scan's own (schema, name)."""
    tables = []
    for name in names:
        parts = name.split(".")
        if len(parts) < 2:
            continue
        try:
            tables.append(store.get_table(source, parts[-2], parts[-1]))
        except NoSuchTableError:
            continue  # a table of another catalog or source
    for schema, name in own:
        if not any(t.schema == schema and t.name == name for t in tables):
            tables.append(store.get_table(source, schema, name))
    return tables


def await_read_after(
    store: MetadataStore, source, opts: "ScanOptions", own: list[tuple[str, str]],
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    tail: Callable[[], TailPin | None] | None = None,
) -> tuple[str | None, str | None, TailPin | None]:
    """`readAfter`: wait until every table of the query on this source that reads the replica
    covers the position asked (`now`: the source's newest commit, asked here) — its max safe
    seq at or past it, or, with `tail` (readTail: pins the service's in-memory tail), the pinned
    tail reaching it — at most `opts.read_after_timeout_s`. Returns (why the replica cannot
    serve the query, or None; a note for the routing record; the tail pin to read through, if
    any). Only the query's first scan on the source waits or pins: a later one finds the query's
    snapshot fixed, at or past the position. Outside any metadata transaction (it polls the
    store, a read per poll)."""
    if opts.snapshot_token and store.fixed_query_snapshot(opts.snapshot_token, source.name) is not None:
        return None, None, None
    pin = tail() if tail else None
    if opts.read_after is None:
        return None, None, pin
    from htap.connectors.registry import open_source

    asked = "now" if opts.read_after == READ_AFTER_NOW else "a seq"
    tables = query_tables(store, source.name, opts.snapshot_tables, own)
    if opts.read_after == READ_AFTER_NOW:
        target = open_source(source).committed_seq([(t.schema, t.name) for t in tables])
    else:
        target = int(opts.read_after)
    start = clock()
    while True:  # (`tables` read before the position was asked is only more behind: conservative)
        behind = [t for t in tables if t.readable and not t.failover and (t.max_safe_seq or 0) < target]
        waited = clock() - start
        if not behind:
            return None, f"read after seq {target} ({asked}): planning waited {waited:.3f} s", pin
        if pin is not None and tail_snapshot(pin, tables) >= target:
            return None, f"read after seq {target} ({asked}): planning waited {waited:.3f} s (in-memory tail)", pin
        if waited >= opts.read_after_timeout_s:
            t = behind[0]
            return (f"the replica is behind the seq the query must read after: {t.qualified_name} is at seq"
                    f" {t.max_safe_seq}, {target - (t.max_safe_seq or 0)} short of {target} (readAfter = {asked}) after"
                    f" {waited:.1f} s (spark.htap.readAfterTimeoutSeconds = {opts.read_after_timeout_s:g})"), None, pin
        if tail is not None:  # pin again (also after a pin that failed: the service may answer now)
            if pin is not None:
                release_tail([pin])
            sleep(0.005)  # the service publishes every 10 ms
            pin = tail()
        else:
            sleep(0.02)
        tables = query_tables(store, source.name, opts.snapshot_tables, own)


def pin_tail(store: MetadataStore, cfg, source, opts: "ScanOptions", own: list[tuple[str, str]]) -> TailPin | None:
    """readTail: pin the in-memory tail of the query's tables of `source` at the service that
    streams it (its endpoint from its heartbeat), for `cfg.pin_ttl_s` (the driver renews and
    releases it with the query's leases). None — the query reads at the durable snapshot — when
    no running service streams the source or it cannot be asked (said in the log)."""
    found = service_tail(store.service_beats(), source.name, store.clock(), cfg.service.tail_secret)
    if found is None:
        log.info("readTail: no running service streams source %s with a tail: reading at the durable snapshot",
                 source.name)
        return None
    endpoint, secret = found
    tables = query_tables(store, source.name, opts.snapshot_tables, own)
    try:
        return tail_pin(endpoint, secret, source.name, [t.id for t in tables], cfg.pin_ttl_s)
    except TailUnavailable as e:
        log.warning("readTail: %s: reading at the durable snapshot", e)
        return None


# --- the read as tasks ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaPartition(InputPartition):
    """Everything an executor needs to read one partition at the query's snapshot (it reads no
    config file, and the metadata store only read-only, at `metadata`)."""

    config: str
    table_id: int
    warehouse: str  # the warehouse's location, and below how to reach it: no config file needed
    table_label: str
    table_schema_b64: str
    key: tuple[str, ...]
    plan: "ReadPlan"
    pushed: str | None
    metadata: str = ""  # where the executor reads the metadata store (read-only)
    window_s: float = 36_000.0
    object_store: object = None  # htap.conf.ObjectStoreConfig of an s3:// warehouse


@dataclass(frozen=True)
class JoinedTablePart:
    """One table of a joined scan in one task: the partition reads it does at the seq."""

    table_id: int
    label: str
    schema_b64: str
    key: tuple[str, ...]
    plans: tuple["ReadPlan", ...]


def _table_part(plan, reads) -> JoinedTablePart:
    """A table's part of a task reading several partitions in one DuckDB query (a joined scan, a
    tree, or a single table's scan in one task): `plan` (htap.pushdown.planning) routed its table,
    `reads` are the partition reads this task does (all of them, or one of a split table's)."""
    t = plan.table
    return JoinedTablePart(t.id, f"{t.source}.{t.qualified_name}", t.arrow_schema_b64, t.key, tuple(reads))


@dataclass(frozen=True)
class JoinedPartition(InputPartition):
    """A task of a joined scan on the replica: every table's reads, one DuckDB query."""

    config: str
    warehouse: str
    tables: tuple[JoinedTablePart, ...]
    pushed: str | None
    metadata: str = ""  # where the executor reads the metadata store (read-only)
    window_s: float = 36_000.0
    object_store: object = None  # htap.conf.ObjectStoreConfig of an s3:// warehouse


@dataclass(frozen=True)
class SourcePartition(InputPartition):
    """A scan answered by the source itself (failover / fallback): the pushed plan as one source
    query over its tables (or one key range of its one table); the executor needs no config
    file and no metadata store."""

    config: str
    source: str
    table_ids: tuple[int, ...]
    pushed: str | None
    snapshot: str | None  # an exported snapshot to read at, if the caller holds one
    source_config: object  # htap.conf.SourceConfig of `source`
    tables: tuple  # htap.replica.models.TableInfo of each scan of the plan
    agreement: object = None  # htap.pushdown.source_reader.SourceReadAgreement, for a snapshot of its own


def _access_targets(store, table, scan) -> list[tuple]:
    """The source tables and columns a scan reads, as the source's privileges see it: a derived
    view's states read the columns of its tables that its groups, aggregates, filter and joins use."""
    if table.kind != KIND_VIEW:
        return [(table, sorted(scan.referenced()))]
    from htap.replica.view_bases import ViewBase
    from htap.replica.view_maintenance import ViewShape

    view = store.get_view(table.source, table.name)
    base = ViewBase.of(store, view)
    # (without the table's key: the states show nothing of it)
    return [(t, sorted(columns)) for t, columns in base.columns_of(ViewShape.of(view.definition, ()))]


def plan_partitions(opts: "ScanOptions") -> list[InputPartition]:
    """A scan's read, planned on the driver: its tables, the reader role's access, each table's
    route, the query's snapshot and the leases (plan_scans: one metadata transaction), then the
    tasks — one source statement (or key range) each, one partition each, or every table's
    reads in one task (or per partition of the split scan). What it returns is all an executor
    reads: no config file, the metadata store only to check a lease."""
    from htap.pushdown.source_reader import check_access, source_ranges
    from htap.replica.warehouse import open_warehouse
    from htap.rewrite.pushed import PushedPlan, to_json

    plan = PushedPlan.from_json(opts.pushed)
    cfg, store, _table = open_scan(opts)
    source = cfg.source(opts.source)
    try:
        tables = []
        for scan in plan.scans:
            schema_name, table_name = scan.table.split(".", 1)
            try:
                tables.append(store.get_table(source.name, schema_name, table_name))
            except NoSuchTableError as e:
                raise NoSuchTableError(f"{NO_SUCH_TABLE_MARKER}: {e}") from e
        role = opts.reader_role(cfg, source)  # round trips to the source: before the metadata transaction
        if role:
            for table, scan in zip(tables, plan.scans):
                for target in _access_targets(store, table, scan):
                    denied = check_access(source, role, *target)
                    if denied:
                        raise PermissionError(f"{PERMISSION_MARKER}: {denied}: the replica never widens access")
        problem = open_warehouse(cfg).unreachable()
        note = pin = None
        if problem is None and opts.as_of_seq is None and opts.as_of_time is None and opts.route != ROUTE_SOURCE:
            own = [(t.schema, t.name) for t in tables]
            tail = (lambda: pin_tail(store, cfg, source, opts, own)) if opts.read_tail and opts.snapshot_token else None
            problem, note, pin = await_read_after(store, source, opts, own, tail=tail)
        requests = [
            ScanRequest(
                source=source.name, schema=t.schema, table=t.name, mode=opts.route, as_of_seq=opts.as_of_seq,
                as_of_time=opts.as_of_time, source_snapshot=opts.source_snapshot,
                snapshot_token=opts.snapshot_token, snapshot_tables=opts.snapshot_tables, warehouse_problem=problem,
                note=note, tail=pin.to_json() if pin else None, tail_owner=opts.lease_owner,
            )
            for t in tables
        ]
        try:
            plans = plan_scans(store, requests, list(plan.scans), plan.to_dict(), window_s=cfg.window_s,
                               pin_ttl_s=cfg.pin_ttl_s, **_held_by_query(cfg, source, opts))
        finally:
            if pin is not None and store.query_tail(opts.snapshot_token, source.name) != pin.to_json():
                release_tail([pin])  # the query's snapshot is not in it: nothing reads through it
    finally:
        store.close()
    if plans[0].route.target != ROUTE_REPLICA:
        snapshot = plans[0].source_snapshot
        single = len(plans) == 1 and plan.split == 0
        # Key ranges as parallel tasks, only at a snapshot they all share (issue 14).
        ranges = (source_ranges(source, plans[0].table, plan, cfg.source_range_rows)
                  if single and snapshot else [plan])
        what = " JOIN ".join(dict.fromkeys(p.table.qualified_name for p in plans))
        agreement = _agreement(opts, cfg, source.name, snapshot, what)
        return [
            SourcePartition(str(cfg.path), source.name, tuple(p.table.id for p in plans),
                            opts.pushed if part is plan else to_json(part), snapshot, source,
                            tuple(p.table for p in plans),
                            agreement and dataclasses.replace(agreement, scan=f"{agreement.scan}/{i}"))
            for i, part in enumerate(ranges)
        ]
    if len(plans) == 1 and plan.split == 0 and plan.split_tasks is None and plans[0].reads:  # one task per partition
        table = plans[0].table
        return [
            ReplicaPartition(
                config=str(cfg.path), table_id=table.id, warehouse=str(cfg.warehouse),
                table_label=f"{table.source}.{table.qualified_name}", table_schema_b64=table.arrow_schema_b64,
                key=table.key, plan=read, pushed=opts.pushed, metadata=opts.executor_metadata or str(cfg.metadata),
                window_s=cfg.window_s, object_store=cfg.object_store,
            )
            for read in plans[0].reads
        ]
    # Every partition of every scan in one task (its aggregate, order and limit final; even
    # with no partition left after pruning: a global aggregate's row), or one task per
    # partition of the split scan, every other scan read whole in each (a co-partitioned one:
    # its rows in the partition's key range). A split scan pruned to no partition is one task
    # too: a pushed partial aggregate still answers its one row (COUNT 0), which Spark's final
    # aggregate needs — with no task at all its SUM of counts would be NULL.
    if plan.split is None or not plans[plan.split].reads:
        tasks = [(tuple(_table_part(p, p.reads) for p in plans), opts.pushed)]
    else:
        tasks = [_split_task(plan, plans, group, opts.pushed) for group in _groups(plans[plan.split].reads, plan.split_tasks)]
    return [JoinedPartition(str(cfg.path), str(cfg.warehouse), task, pushed,
                            opts.executor_metadata or str(cfg.metadata), cfg.window_s, cfg.object_store)
            for task, pushed in tasks]


def _groups(reads: tuple[ReadPlan, ...], tasks: int | None) -> list[tuple[ReadPlan, ...]]:
    """The split scan's partition reads (in key order) as at most `tasks` runs of neighbours of
    nearly equal length (None: one read each)."""
    n = len(reads) if tasks is None else max(1, min(tasks, len(reads)))
    return [reads[len(reads) * i // n:len(reads) * (i + 1) // n] for i in range(n)]


def _split_task(plan, plans, group: tuple[ReadPlan, ...], pushed: str) -> tuple[tuple[JoinedTablePart, ...], str]:
    """The task of a run of neighbouring partitions `group` of the split scan: its tables' reads
    and its pushed plan. A co-partitioned scan j (joined by the split table's partition column =
    j's column c) keeps only its rows with c in the run's key range — the only ones that can join
    its rows (a range that takes in partitions the scan's filter pruned only adds rows nothing
    joins) — and, when c is j's own partition column, only its partitions that can hold them."""
    from htap.pushdown.source_reader import key_range_conjuncts
    from htap.rewrite.pushed import to_json

    reads = [group if i == plan.split else p.reads for i, p in enumerate(plans)]
    low, high = group[0].key_range[0], group[-1].key_range[1]
    key0 = plans[plan.split].table.key[0]
    key_type = plans[plan.split].table.arrow_schema.field(key0).type
    if plan.co_split and (low, high) != (None, None) and _range_key(key_type):
        for j, column in plan.co_split:
            table = plans[j].table
            plan = plan.with_filter(j, key_range_conjuncts(column, table.arrow_schema.field(column).type, low, high))
            if column == table.key[0]:
                reads[j] = tuple(r for r in reads[j] if _overlaps(r.key_range, low, high))
        pushed = to_json(plan)
    return tuple(_table_part(p, r) for p, r in zip(plans, reads)), pushed


def _range_key(t) -> bool:
    """Whether a split by key ranges of this type may restrict a co-partitioned table (integer and
    date keys, as the shim offers them: one order everywhere, no NaN)."""
    import pyarrow as pa

    return pa.types.is_int16(t) or pa.types.is_int32(t) or pa.types.is_int64(t) or pa.types.is_date32(t)


def _overlaps(key_range: tuple, low, high) -> bool:
    """Whether a partition's [a, b) meets [low, high) (None: unbounded)."""
    a, b = key_range
    return (a is None or high is None or a < high) and (b is None or low is None or low < b)


def _held_by_query(cfg, source, opts: "ScanOptions") -> dict:
    """What a scan's planning holds for its query, by the scan's lease owner (the driver releases
    both when the query ends): its leases (`holder`), and the source snapshot it may export."""
    from htap.pushdown.source_snapshot import export_held_snapshot
    from htap.replica.leases import query_holder

    return {"export": lambda: export_held_snapshot(str(cfg.path), source.name, owner=opts.lease_owner),
            "holder": query_holder(opts.lease_owner) if opts.lease_owner else None}


def _agreement(opts: "ScanOptions", cfg, source: str, snapshot: str | None, what: str):
    """For a source scan of a query whose source reads cannot share one snapshot (MySQL/MariaDB):
    what its task needs to check that it reads the same state as the query's other scans of the
    source (htap.pushdown.source_reader.SourceReadAgreement); None otherwise (Postgres imports
    the one exported snapshot; a scan without the query's token decides alone). The planned
    scan's own id, so a retry of its task replaces, not contradicts, its earlier attempt. The
    record goes to the store as executors reach it (`executor_metadata`, default the config's):
    the one write an executor makes, a row per scan, to that one table."""
    from htap.pushdown.source_reader import SourceReadAgreement, reads_own_snapshot

    if not opts.snapshot_token or not reads_own_snapshot(snapshot):
        return None
    return SourceReadAgreement(opts.executor_metadata or str(cfg.metadata), opts.snapshot_token, source,
                               uuid.uuid4().hex, what)
