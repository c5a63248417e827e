"""connectors/pgstreaming.py: what one streamed transaction delivers at its commit, whether kept
in memory or spilled, with rolled-back subtransactions dropped as Postgres' own apply worker
drops them (every event from the subtransaction's first on, at the time of its abort)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.connectors.changes import Relation, RowBatch, RowChange
from htap.connectors.pgstreaming import StreamedTxn

TOP = 100


def change(n: int) -> RowChange:
    return RowChange("s", "t", "upsert", [str(n)])


def batch(n: int, rows: int) -> RowBatch:
    return RowBatch("s", "t", "upsert", [pa.array([f"{n}.{i}" for i in range(rows)])])


# A script: ("add", subxid, rows) appends a batch (rows > 1) or a change, ("abort", subxid) rolls one back.
steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from([TOP, 101, 102, 103]), st.integers(1, 5)),
    st.tuples(st.just("abort"), st.sampled_from([101, 102, 103])),
    st.tuples(st.just("relation"), st.sampled_from([TOP, 101, 102])),
), max_size=30)


@PROPERTY
@given(steps, st.integers(1, 12))
def test_a_streamed_transaction_delivers_what_was_not_rolled_back(script, spill_at):
    txn = StreamedTxn(TOP, spill_at=spill_at)
    model: list = []  # (subxid, event)
    firsts: dict[int, int] = {}
    for n, step in enumerate(script):
        if step[0] == "add":
            _, subxid, rows = step
            event = batch(n, rows) if rows > 1 else change(n)
            if subxid != TOP and subxid not in firsts:
                firsts[subxid] = len(model)
            txn.add(subxid, [event])
            model.append((subxid, event))
        elif step[0] == "relation":
            event = Relation("s", "t", (f"c{n}",))
            if step[1] != TOP and step[1] not in firsts:
                firsts[step[1]] = len(model)
            txn.add(step[1], [event])
            model.append((step[1], event))
        else:
            start = firsts.get(step[1])
            if start is not None:
                # Everything from its first event on goes, but a table's description stays.
                model = model[:start] + [(x, e) for x, e in model[start:] if isinstance(e, Relation)]
                firsts = {x: i for x, i in firsts.items() if i < start}
            txn.abort_subtransaction(step[1])
    got = list(txn.events())
    want = [e for _, e in model]
    assert [shown(e) for e in got] == [shown(e) for e in want]


def shown(event) -> tuple:
    if isinstance(event, RowBatch):
        return ("batch", event.op, *(tuple(c.to_pylist()) for c in event.columns))
    if isinstance(event, RowChange):
        return ("change", event.op, tuple(event.values))
    return ("relation", event.columns)
