"""Keeping a lease alive while a task reads under it.

A read plan (htap.replica.snapshot.ReadPlan) is made on one machine (Spark's driver) and read on
another, maybe much later (a busy cluster queues tasks). The task renews the plan's lease before
it opens a file and then every `lease_s / 3` from a thread of its own until it ends, so a lease
lives exactly as long as some task still reads under it, plus at most `lease_s`; nobody has to
tell the store that a query ended. A task that finds its lease gone (it waited longer than
`lease_s` to start) plans its partition again at the same seq from the live deltas, under a new
lease: compaction keeps every seq of the queryable window readable, so the rows are the same.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from htap.errors import ReplicaError
from htap.replica.metadata import MetadataStore
from htap.replica.snapshot import ReadPlan, pin_and_plan

log = logging.getLogger(__name__)


class RepartitionedError(ReplicaError):
    """A read's partition is no longer in the layout its seq now reads (a split or merge
    committed in between, and the read's lease lapsed): the query must be planned again."""


def renewed_plan(store: MetadataStore, table_id: int, plan: ReadPlan, lease_s: float, window_s: float) -> ReadPlan:
    """`plan` with a live lease: its own, renewed, or when that is gone, a new plan of the same
    partition at the same seq (OutsideWindow when the seq has left the window meanwhile)."""
    if plan.lease is None or store.renew_pin(plan.lease, lease_s):
        return plan
    log.info("the lease of a read at seq %s lapsed before its task started: planning partition %d again", plan.seq, plan.part)
    table = store.table_by_id(table_id)
    again = pin_and_plan(store, table, plan.seq, window_s, lease_s)
    mine = [p for p in again if p.part == plan.part]
    if mine:
        return mine[0]
    raise RepartitionedError(
        f"{table.qualified_name}: partition {plan.part} was split or merged after this query was planned and the"
        f" read's lease lapsed before its task started; re-run the query"
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
