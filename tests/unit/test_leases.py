"""Leases against garbage collection, driven by a manual clock (SQLite store, no service).

Property: whatever the interleaving of reads (which share a process's lease), task renewals,
compactions, garbage collection and the clock, garbage collection never deletes a delta that a
read still holding a live lease was given; and a renewal succeeds exactly while the lease lives.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from htap.errors import ReplicaError
from htap.replica.leases import current_plan, query_holder
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import STATE_STREAMING, Column
from htap.replica.read_plans import pin_and_plan

LEASE_S = 30.0

actions = st.lists(
    st.one_of(
        st.tuples(st.just("read")),
        st.tuples(st.just("renew"), st.integers(0, 20)),
        st.tuples(st.just("compact")),
        st.tuples(st.just("gc")),
        st.tuples(st.just("wait"), st.floats(0.5, 40.0)),
    ),
    max_size=40,
)


class Clock:
    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def new_store(root: Path, clock: Clock) -> tuple[MetadataStore, int]:
    store = MetadataStore(root / "m.db", create=True, clock=clock)
    t = store.add_table("src", "public", "t", [Column("id", "integer", False)], ["id"], "schema")
    store.start_copy(t.id)
    store.finish_copy(t.id, [NewDelta(t.id, "d0", 1, 1, 1, 1)], 1, None)
    store.commit_checkpoint("src", [], 5, clock())
    store.set_state(t.id, STATE_STREAMING)
    return store, t.id


@settings(max_examples=60, deadline=None)
@given(actions)
def test_gc_never_deletes_what_a_live_lease_was_given(steps):
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        store, table_id = new_store(Path(tmp), clock)
        names = (f"d{i}" for i in itertools.count(1))
        expiry: dict[int, float] = {}  # the model: lease -> when it lapses
        # Reads: (lease, paths they were given, until when `lease` promised them without renewal).
        given_to: list[tuple[int, set[str], float]] = []
        deleted: set[str] = set()
        try:
            for step in steps:
                if step[0] == "read":
                    lease, deltas = store.lease(table_id, 5, LEASE_S)
                    expiry.setdefault(lease, clock.now + LEASE_S)
                    given_to.append((lease, {d.path for d in deltas}, clock.now + LEASE_S / 2))
                    assert not {d.path for d in deltas} & deleted
                elif step[0] == "renew" and given_to:
                    lease = given_to[step[1] % len(given_to)][0]
                    alive = expiry[lease] > clock.now
                    assert store.renew_pin(lease, LEASE_S) == alive
                    if alive:
                        expiry[lease] = max(expiry[lease], clock.now + LEASE_S)
                elif step[0] == "compact":
                    assert store.replace_deltas(table_id, store.deltas(table_id), [NewDelta(table_id, next(names), 1, 5, 1, 1)])
                elif step[0] == "gc":
                    gone = set(store.collect_garbage())
                    held = set().union(*[paths for lease, paths, until in given_to
                                         if max(until, expiry[lease]) > clock.now])
                    assert not gone & held, f"deleted {gone & held} under a live lease"
                    deleted |= gone
                elif step[0] == "wait":
                    clock.now += step[1]
        finally:
            store.close()


def test_a_task_whose_lease_ended_plans_its_partition_again_at_the_same_seq_reading_only():
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        store, table_id = new_store(Path(tmp), clock)
        executor = MetadataStore(Path(tmp) / "m.db", read_only=True, clock=clock)
        try:
            table = store.table_by_id(table_id)
            (plan,) = pin_and_plan(store, table, 5, 3_600.0, LEASE_S, holder=query_holder("q1"))
            assert plan.delta_paths == ("d0",) and plan.lease is not None
            clock.now += 10
            assert current_plan(executor, table_id, plan, 3_600.0) == plan  # the driver holds it
            assert store.renew_held([query_holder("q1")], LEASE_S) == 1
            store.replace_deltas(table_id, store.deltas(table_id), [NewDelta(table_id, "d1", 1, 5, 1, 1)])
            assert store.collect_garbage() == []  # the query's lease keeps "d0"
            assert store.release_held([query_holder("q1")]) == 1  # the query ended
            assert store.collect_garbage() == ["d0"]
            again = current_plan(executor, table_id, plan, 3_600.0)  # the plan run again later
            assert again.delta_paths == ("d1",) and again.seq == 5 and again.lease is None
        finally:
            executor.close()
            store.close()


def test_an_executors_store_refuses_every_write():
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        store, table_id = new_store(Path(tmp), clock)
        executor = MetadataStore(Path(tmp) / "m.db", read_only=True, clock=clock)
        try:
            assert executor.table_by_id(table_id).name == "t"
            for write in (lambda: executor.set_state(table_id, "unhealthy", "x"),
                          lambda: executor.pin(table_id, 5, LEASE_S),
                          lambda: executor.renew_held(["h"], LEASE_S)):
                with pytest.raises(ReplicaError, match="read-only"):
                    write()
            # SQLite itself refuses too, not only our guard.
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                executor._db.execute("DELETE FROM pins")
        finally:
            executor.close()
            store.close()


def test_a_repartition_keeps_old_partitions_for_reads_below_it_and_a_lapsed_task_of_them_fails():
    """A split at seq 3 (metadata only): reads at seq 2 plan the old partition and its retired
    delta, reads at 5 the new ones; garbage collection keeps the old delta while the window or a
    lease reaches below 3; a task of the old partition whose lease ended fails (re-run the query)."""
    import pytest

    from htap.replica.leases import RepartitionedError
    from htap.replica.models import Layout

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        store, table_id = new_store(Path(tmp), clock)
        try:
            table = store.table_by_id(table_id)
            (old_plan,) = pin_and_plan(store, table, 5, 3_600.0, LEASE_S)
            old = table.layout
            new = Layout(None, (1,), 3)  # one partition, new id: the shape of a split is not the point here
            assert store.commit_layout(table_id, old, new, store.deltas(table_id), [NewDelta(table_id, "n1", 1, 5, 1, 1, part=1)], "test")
            assert not store.commit_layout(table_id, old, new, [], [], "again")  # the layout moved on: refused
            table = store.table_by_id(table_id)
            assert table.layout.ids == (1,) and store.layout_at(table_id, 2).ids == (0,) and store.layout_at(table_id, 3).ids == (1,)
            clock.now += LEASE_S / 2 + 1  # the process's shared lease is too old to lend
            assert [(p.part, p.delta_paths) for p in pin_and_plan(store, table, 2, 3_600.0, LEASE_S)] == [(0, ("d0",))]
            assert [(p.part, p.delta_paths) for p in pin_and_plan(store, table, 5, 3_600.0, LEASE_S)] == [(1, ("n1",))]
            clock.now += LEASE_S + 1  # every lease lapsed
            assert store.collect_garbage({table_id: 2}) == []  # the window still reaches below seq 3
            with MetadataStore(Path(tmp) / "m.db", read_only=True, clock=clock) as executor:
                with pytest.raises(RepartitionedError, match="re-run the query"):
                    current_plan(executor, table_id, old_plan, 3_600.0)
            clock.now += LEASE_S + 1
            assert store.collect_garbage({table_id: 3}) == ["d0"]
        finally:
            store.close()
