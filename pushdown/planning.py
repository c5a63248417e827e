"""Planning one scan: its route, the query's snapshot, the pin and the routing record, all from
ONE metadata transaction.

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

import time
from dataclasses import dataclass
from typing import Callable

from htap.errors import HtapError, NoSuchTableError
from htap.pushdown.routing import ROUTE_AUTO, ROUTE_REPLICA, ROUTE_SOURCE, Route, RoutingError, decide
from htap.replica.metadata import QUERY_READS_SOURCE, MetadataStore
from htap.replica.models import TableInfo
from htap.replica.snapshot import ReadPlan, pin_and_plan, queryable_window, seq_for_time
from htap.rewrite.pushed import Scan


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
    warehouse_problem: str | None = None  # why the warehouse cannot be read now (Warehouse.unreachable)


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
                plans = []
                recorded = set()
                for table, (route, snapshot), scan in zip(tables, routed, scans):
                    reads: tuple[ReadPlan, ...] = ()
                    if route.target == ROUTE_REPLICA:
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
    if window is None or not window.min_seq <= fixed <= window.max_seq:
        problem = f"the replica is {table.state}" if window is None else f"its window is [{window.min_seq}, {window.max_seq}]"
        raise RoutingError(
            f"{table.qualified_name}: the query reads its source's tables at replica seq {fixed}, but {problem};"
            " re-run the query"
        )
    return Route(ROUTE_REPLICA, fixed, "replica healthy and fresh (the query's snapshot)"), None


def _fix_query_snapshot(store: MetadataStore, req: ScanRequest, window_s: float, now: float, exported: str | None) -> int:
    """The first scan of a query on a source: where every table of that source in the query reads."""
    tables = []
    for name in req.snapshot_tables:
        parts = name.split(".")
        if len(parts) < 2:
            continue
        try:
            tables.append(store.get_table(req.source, parts[-2], parts[-1]))
        except NoSuchTableError:
            continue  # a table of another catalog or source
    if not any(t.schema == req.schema and t.name == req.table for t in tables):
        tables.append(store.get_table(req.source, req.schema, req.table))
    seqs = [t.max_safe_seq for t in tables if t.readable and not t.failover]
    candidate = min(seqs) if seqs else None
    routes = [decide(t, queryable_window(store, t, window_s), now, mode=req.mode, snapshot=candidate,
                     unavailable=req.warehouse_problem) for t in tables]
    if all(r.target == ROUTE_REPLICA for r in routes):
        return store.query_snapshot(req.snapshot_token, req.source, candidate)
    # Even a query of one table may scan it twice (self-join, UNION ALL): always one snapshot.
    snapshot = req.source_snapshot or exported
    if snapshot is None:
        raise _NeedsExport()
    store.fix_query_source_snapshot(req.snapshot_token, req.source, snapshot)
    return store.fixed_query_snapshot(req.snapshot_token, req.source)  # another scan may have been first
