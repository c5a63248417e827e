"""Leases of Spark queries: taken by the driver, held by the driver, only read by executors.

A read plan (htap.replica.read_plans.ReadPlan) is made on Spark's driver, while the query is
planned, under a lease of the query's scan (`query_holder`). The driver renews the leases of a
running query every `pin_ttl_s / 4` and releases them when the query ends (the shim's
HtapQueryListener and LeaseKeeper, through `python -m htap.catalog.bridge`); the TTL is the
safety net when the driver dies. Executors never write the metadata store: a task only checks
that its plan's lease still lives (`current_plan`). If it does not (the same physical plan run
again after its query ended, e.g. a DataFrame collected twice), the task plans its partition
again at the same seq from the live deltas, without a lease: compaction keeps every seq of the
queryable window readable, so the rows are the same, and only a compaction finishing during
that read can make it fail ("re-run the query").

`kept` renews a lease from a thread of the process that holds it (`htap verify data`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from htap.errors import ReplicaError
from htap.replica import tail
from htap.replica.metadata import MetadataStore
from htap.replica.read_plans import ReadPlan, plan_unleased

log = logging.getLogger(__name__)

QUERY_HOLDER_PREFIX = "spark-scan "


class RepartitionedError(ReplicaError):
    """A read's partition is no longer in the layout its seq now reads (a split or merge
    committed in between, and the read's lease lapsed): the query must be planned again."""


def query_holder(owner: str) -> str:
    """The pins.holder of the leases a Spark scan's planning took (`owner`: the scan's lease
    owner, a UUID the shim gives every HtapScan)."""
    return QUERY_HOLDER_PREFIX + owner


def renew_queries(store: MetadataStore, owners: list[str], ttl_s: float) -> int:
    """Queries still running (their scans' lease `owners`): their leases, and their pins of a
    service's in-memory tail, live at least `ttl_s` more. How many leases."""
    renewed = store.renew_held([query_holder(o) for o in owners], ttl_s)
    tail.renew([tail.TailPin.from_json(p) for p in store.query_tails_of(owners)], ttl_s)
    return renewed


def release_queries(store: MetadataStore, owners: list[str]) -> int:
    """Queries ended: everything their scans (lease `owners`) hold — leases, tail pins — ends.
    How many leases there were."""
    released = store.release_held([query_holder(o) for o in owners])
    tail.release([tail.TailPin.from_json(p) for p in store.query_tails_of(owners, take=True)])
    return released


def current_plan(store: MetadataStore, table_id: int, plan: ReadPlan, window_s: float) -> ReadPlan:
    """`plan` while its lease lives; when that is gone, the same partition at the same seq
    planned from the live deltas, unleased (OutsideWindow when the seq has left the window).
    Reads only: `store` may be read-only."""
    if plan.lease is None or store.pin_alive(plan.lease):
        return plan
    log.info("the lease of a read at seq %s has ended (its query ended): planning partition %d again, unleased",
             plan.seq, plan.part)
    table = store.table_by_id(table_id)
    again = [p for p in plan_unleased(store, table, plan.seq, window_s) if p.part == plan.part]
    if again:
        return dataclasses.replace(again[0], tail=plan.tail)
    raise RepartitionedError(
        f"{table.qualified_name}: partition {plan.part} was split or merged after this query was planned and the"
        f" read's lease ended before its task started; re-run the query"
    )


@contextmanager
def kept(location: str, lease: int | None, lease_s: float, every_s: float | None = None) -> Iterator[None]:
    """Renew `lease` every `every_s` (default `lease_s / 3`) from a thread with its own store
    connection, until the block ends."""
    if lease is None:
        yield
        return
    stop = threading.Event()

    def renew() -> None:
        store = MetadataStore(location)
        try:
            while not stop.wait(every_s or lease_s / 3):
                if not store.renew_pin(lease, lease_s):
                    log.warning("lease %d lapsed while its task was still reading", lease)
                    return
        finally:
            store.close()

    thread = threading.Thread(target=renew, name=f"lease-{lease}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
