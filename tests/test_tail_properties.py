"""The in-memory tail's reads equal the table at their snapshot (issue 28 item 2), as a property.

Random transactions — full and partial (unchanged TOAST) upserts, deletes, key changes with and
without their values, truncations — go through the service's buffer; the buffer publishes to a
real TailStore served over Arrow Flight at random points, and checkpoints are drained at others and
committed later (the stream goes on meanwhile, as in the service).
At random moments a reader pins the tail as a query's planning does, reads every partition at the
pin's snapshot (the deltas at the durable seq, the tail above it; partition by partition and in
one task), and must get exactly the model's rows at that snapshot. The snapshot must be the newest
published seq unless the table's tail stopped (a truncation or a moved partial row since the last
checkpoint), so the test fails if the tail serves nothing as well as if it serves wrong rows.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from htap.connectors.changes import UNSET
from htap.ingest.tail import Tails
from htap.pushdown.planning import tail_snapshot, with_tail
from htap.pushdown.replica_reader import JoinedTableRead, read_joined, read_plan
from htap.replica import tail as tail_client
from htap.replica.deltas import write_partitioned
from htap.rewrite.pushed import table_plan

from storage_support import SOURCE, DirectTable

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("note", pa.string())])
KEYS = st.sampled_from([1, 2, 3, 21, 22, 41, 42, 55])  # few keys in three partitions: versions collide


@pytest.fixture(scope="module")
def tails():
    t = Tails(1 << 30)
    t.serve("127.0.0.1:0")
    yield t
    t.shutdown()


change = st.one_of(
    st.tuples(st.just("upsert"), KEYS, st.integers(-5, 5), st.sampled_from(["a", "b", None, UNSET])),
    st.tuples(st.just("partial"), KEYS, st.integers(-5, 5)),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("move"), KEYS, KEYS, st.booleans()),
)
# A transaction, then (mostly: the service publishes every 10 ms) a publish.
txn = st.tuples(st.lists(change, min_size=1, max_size=4), st.booleans()).map(lambda t: ("txn", *t))
# Weighted by repetition: mostly transactions, publishes and reads; checkpoints and truncations rarer.
step = st.one_of(txn, txn, txn, st.just(("publish",)), st.just(("publish",)), st.just(("read",)), st.just(("read",)),
                 st.just(("drain",)), st.just(("commit",)), st.sampled_from([("truncate",), ("txn", [], False)]))


@settings(max_examples=max(100, settings().max_examples), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=5, max_size=40))
def test_tail_reads_equal_the_table_at_their_snapshot(tmp_path_factory, tails, steps):
    root = tmp_path_factory.mktemp("tail")
    table = DirectTable(root, SCHEMA, ["k"], [20, 40])
    tid = table.table.id
    store = tails.store(SOURCE)
    store.restart(0)
    rows: dict[int, tuple] = {}
    at: dict[int, dict[int, tuple]] = {0: {}}  # the model: the table's rows at each seq
    seq = published = 0
    pending = None  # a drained checkpoint not yet committed: (its rows, its seq, its truncations)
    truncated = False  # a truncation buffered since the last drain
    stops: list[int] = []  # seqs of changes that stop the tail until a committed checkpoint holds them

    def publish():
        nonlocal published
        part = table.buffer.publish()
        ok = {tid} if table.buffer.servable() and not truncated else set()
        store.publish(seq, {tid: part} if part is not None else {}, ok, {tid})
        published = seq

    for s in steps:
        if s[0] == "txn" and s[1]:
            seq += 1
            for c in s[1]:
                if c[0] == "upsert":
                    if c[3] is UNSET and c[1] not in rows:
                        continue  # a new row always carries its values
                    note = rows[c[1]][2] if c[3] is UNSET else c[3]
                    table.upsert([c[1], c[2], c[3]], seq)
                    rows[c[1]] = (c[1], c[2], note)
                elif c[0] == "partial" and c[1] in rows:
                    table.upsert([c[1], c[2], UNSET], seq)
                    rows[c[1]] = (c[1], c[2], rows[c[1]][2])
                elif c[0] == "delete" and c[1] in rows:
                    table.delete([c[1], None, None], seq)
                    del rows[c[1]]
                elif c[0] == "move" and c[1] in rows and c[2] not in rows:
                    old = rows.pop(c[1])
                    with_values = c[3] or c[1] == c[2]
                    table.change_key([c[1], old[1], old[2]], [c[2], old[1], old[2] if with_values else UNSET], seq)
                    rows[c[2]] = (c[2], old[1], old[2])
                    if not with_values:
                        stops.append(seq)
            at[seq] = dict(rows)
            if s[2]:
                publish()
        elif s[0] == "txn":
            continue
        elif s[0] == "truncate":
            seq += 1
            table.truncate(seq)
            rows.clear()
            at[seq] = {}
            truncated = True
            stops.append(seq)
        elif s[0] == "publish":
            publish()
        elif s[0] == "drain" and pending is None:
            # As the service: publish (the tail's segments end where checkpoints do), drain, and
            # go on streaming while the checkpoint is written (until "commit").
            publish()
            pending = (table.buffer.drain() if len(table.buffer) else None, seq, table.truncations)
            table.truncations = []
            truncated = False
        elif s[0] == "commit" and pending is not None:
            data, safe, truncations = pending
            with ExitStack() as locks:
                deltas = (write_partitioned(table.warehouse, table.table, data, table.live, locks, table.store)
                          if data is not None else [])
                table.store.commit_checkpoint(SOURCE, deltas, safe, table.store.clock(), truncations)
            table.table = table.store.table_by_id(tid)
            store.checkpointed(safe)
            stops = [x for x in stops if x > safe]
            pending = None
        else:
            pin = tail_client.pin(tails.endpoint, tails.secret, SOURCE, [tid], 60.0)
            try:
                durable = table.table.max_safe_seq
                snapshot = max(durable, tail_snapshot(pin, [table.table]))  # as planning decides
                if not stops:
                    assert snapshot == published or published <= durable, (snapshot, published, durable)
                plans = table.plans(durable)
                reads = with_tail(table.store, plans, table.table, pin, snapshot) if snapshot > durable else plans
                event("read through the tail" if snapshot > durable else "read of the deltas only")
                want = sorted(at[snapshot].values())
                assert _rows(_partition_reads(table, reads)) == want, f"at seq {snapshot} (durable {durable})"
                assert _rows(_one_task(table, reads)) == want, f"one task at seq {snapshot} (durable {durable})"
            finally:
                tail_client.release([pin])


def _partition_reads(table: DirectTable, reads) -> pa.Table:
    schema = table.table.arrow_schema
    every = table_plan(table.table.qualified_name, schema.names)
    batches = [b for r in reads for b in read_plan(table.warehouse, "t", schema, ["k"], r, every, schema)]
    return pa.Table.from_batches(batches, schema=schema)


def _one_task(table: DirectTable, reads) -> pa.Table:
    schema = table.table.arrow_schema
    read = JoinedTableRead("t", schema, ["k"], tuple(reads))
    every = table_plan(table.table.qualified_name, schema.names)
    return pa.Table.from_batches(list(read_joined(table.warehouse, [read], every, schema)), schema=schema)


def _rows(t: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def test_a_pin_keeps_its_rows_across_a_checkpoint_and_an_unknown_pin_is_an_error(tmp_path, tails):
    """A query planned before a checkpoint reads the same rows after it; a pin the service does not
    hold (it restarted, or the pin ended) fails the read with what to do, never reads less."""
    table = DirectTable(tmp_path, SCHEMA, ["k"], None)
    tid = table.table.id
    store = tails.store(SOURCE)
    store.restart(0)
    table.upsert([1, 10, "a"], 1)
    store.publish(1, {tid: table.buffer.publish()}, {tid}, {tid})
    pin = tail_client.pin(tails.endpoint, tails.secret, SOURCE, [tid], 60.0)
    assert pin.snapshot([tid]) == 1 and pin.durable == 0
    (read,) = with_tail(table.store, table.plans(0), table.table, pin, 1)
    table.checkpoint(1)
    store.checkpointed(1)
    assert _rows(_partition_reads(table, [read])) == [(1, 10, "a")]
    tail_client.release([pin])
    with pytest.raises(tail_client.TailUnavailable, match=r"re-run the query"):
        _partition_reads(table, [read])
    with pytest.raises(tail_client.TailUnavailable, match=r"htap-tail-secret"):
        tail_client.pin(tails.endpoint, "wrong", SOURCE, [tid], 60.0)
    dataclasses.replace(pin)  # the pin is a plain value: planning keeps it in the metadata store as JSON
    assert tail_client.TailPin.from_json(pin.to_json()) == pin


def test_changes_after_a_drained_checkpoint_stay_readable_when_it_commits(tmp_path, tails):
    """The stream goes on while a checkpoint is written: what it publishes meanwhile is above the
    checkpoint's seq, and its commit must not drop it (only what the commit made durable)."""
    table = DirectTable(tmp_path, SCHEMA, ["k"], [20])
    tid = table.table.id
    store = tails.store(SOURCE)
    store.restart(0)
    table.upsert([1, 10, "a"], 1)
    store.publish(1, {tid: table.buffer.publish()}, {tid}, {tid})
    drained = table.buffer.drain()  # the checkpoint at seq 1, being written
    table.upsert([1, 11, UNSET], 2)  # a partial row whose value is in that checkpoint
    table.upsert([30, 20, "b"], 2)
    store.publish(2, {tid: table.buffer.publish()}, {tid}, {tid})
    with ExitStack() as locks:
        deltas = write_partitioned(table.warehouse, table.table, drained, table.live, locks, table.store)
        table.store.commit_checkpoint(SOURCE, deltas, 1, table.store.clock())
    table.table = table.store.table_by_id(tid)
    store.checkpointed(1)
    pin = tail_client.pin(tails.endpoint, tails.secret, SOURCE, [tid], 60.0)
    try:
        assert (pin.durable, tail_snapshot(pin, [table.table])) == (1, 2)
        reads = with_tail(table.store, table.plans(1), table.table, pin, 2)
        assert _rows(_partition_reads(table, reads)) == [(1, 11, "a"), (30, 20, "b")]
    finally:
        tail_client.release([pin])
