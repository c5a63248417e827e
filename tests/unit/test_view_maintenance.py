"""htap.replica.view_maintenance: random histories of a base table — inserts, updates that move
rows between groups (NULL groups too), deletes, deletes and re-inserts, truncations, several
transactions per checkpoint — applied checkpoint by checkpoint; the view read at every seq
equals the aggregate of the base at that seq, computed from the model."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ
from htap.replica.view_maintenance import ROWS, Aggregate, ViewShape, group_changes
from htap.rewrite.views import parse_view

from storage_support import ViewVersions

AGGREGATES = (Aggregate("_count_x", "count", "x"), Aggregate("_sum_x", "sum", "x"), Aggregate("_min_x", "min", "x"),
              Aggregate("_max_x", "max", "x"))
BASE = pa.schema([("k", pa.int64()), ("g", pa.int64()), ("x", pa.int64()), ("f", pa.int64())])

keys = st.integers(0, 6)
put = st.tuples(st.just("put"), keys, st.one_of(st.none(), st.integers(0, 2)), st.one_of(st.none(), st.integers(-4, 4)),
                st.integers(0, 2))
delete = st.tuples(st.just("del"), keys)
# A transaction: optionally a TRUNCATE first, then changes of distinct keys.
transaction = st.tuples(st.sampled_from([False, False, False, False, True]),
                        st.lists(st.one_of(put, put, delete), max_size=4, unique_by=lambda op: op[1]))
history = st.lists(st.lists(transaction, min_size=1, max_size=4), min_size=1, max_size=6)


def _aggregate(rows: dict, shape: ViewShape) -> dict:
    """The view's expected content over the model's rows: group -> states."""
    out: dict = {}
    for k, (g, x, f) in rows.items():
        if shape.filter_sql and not f > 0:
            continue
        group = (g,) if shape.groups else ()
        out.setdefault(group, []).append(x)
    expected = {}
    for group, xs in out.items():
        present = [x for x in xs if x is not None]
        expected[group] = (len(xs), len(present), sum(present) if present else None,
                           min(present) if present else None, max(present) if present else None)
    return expected


def _run(shape: ViewShape, checkpoints) -> None:
    rows: dict = {}  # the base now: key -> (g, x, f)
    history = {0: {}}  # seq -> the base after it
    view = ViewVersions(shape)
    seq = previous = 0
    for checkpoint in checkpoints:
        versions, truncations, changed = [], [], set()
        for truncate, ops in checkpoint:
            seq += 1
            if truncate:
                rows = {}
                truncations.append(seq)
            for op in ops:
                changed.add(op[1])
                if op[0] == "put":
                    rows[op[1]] = op[2:]
                    versions.append({"k": op[1], "g": op[2], "x": op[3], "f": op[4], SEQ: seq, OP: OP_UPSERT})
                else:
                    rows.pop(op[1], None)
                    versions.append({"k": op[1], "g": None, "x": None, "f": None, SEQ: seq, OP: OP_DELETE})
            history[seq] = dict(rows)
        at_p = history[previous]
        before = [{"k": k, "g": v[0], "x": v[1], "f": v[2]} for k, v in at_p.items() if k in changed]

        def extremes(groups: pa.Table, at_p=at_p, changed=changed) -> pa.Table:
            untouched = {k: v for k, v in at_p.items() if k not in changed}
            kept = _aggregate(untouched, shape)
            out = []
            for g in groups.to_pylist():
                group = tuple(g[c] for c in shape.groups)
                states = kept.get(group)
                out.append({**g, "_min_x": states[3] if states else None, "_max_x": states[4] if states else None})
            return pa.Table.from_pylist(out, schema=pa.schema(
                [pa.field(c, pa.int64()) for c in shape.groups] + [pa.field("_min_x", pa.int64()), pa.field("_max_x", pa.int64())]))

        out = group_changes(shape, previous, pa.Table.from_pylist(before, schema=BASE),
                            pa.Table.from_pylist(versions, schema=BASE.append(pa.field(SEQ, pa.int64())).append(
                                pa.field(OP, pa.int8()))),
                            view.states_table(previous), truncations, extremes)
        view.add(out, truncations)
        for s in range(previous + 1, seq + 1):
            got = {g: tuple(None if v is None else int(v) for v in states) for g, states in view.at(s).items()}
            assert got == _aggregate(history[s], shape), (s, checkpoints)
        previous = seq


@settings(max_examples=200, deadline=None)
@given(history, st.booleans(), st.booleans())
def test_a_view_equals_its_bases_aggregate_at_every_seq(checkpoints, grouped, filtered):
    """Grouped: the shape of a view defined in SQL (htap.rewrite.views); global: by hand."""
    if grouped:
        where = " WHERE f > 0" if filtered else ""
        definition = parse_view(f"SELECT g, count(*), count(x), sum(x), min(x), max(x) FROM s.t{where} GROUP BY g",
                                {"s.t": BASE})
        shape = ViewShape.of(definition, ["k"])
        assert shape.aggregates == AGGREGATES
    else:
        shape = ViewShape(key=("k",), groups=(), aggregates=AGGREGATES, filter_sql="f > 0" if filtered else None)
    _run(shape, checkpoints)


def test_removing_the_minimum_recomputes_it_from_the_rows_left_alone():
    """Group 1 holds 1, 5, 9; the checkpoint deletes the 1 (the minimum) and updates 9 to 3: the
    minimum is then 3 (a changed row) and the maximum 5 (a row left alone, from `extremes`)."""
    shape = ViewShape(key=("k",), groups=("g",), aggregates=AGGREGATES)
    _run(shape, [[(False, [("put", 0, 1, 1, 0), ("put", 1, 1, 5, 0), ("put", 2, 1, 9, 0)])],
                 [(False, [("del", 0)]), (False, [("put", 2, 1, 3, 0)])]])


def test_a_sum_without_its_count_is_refused():
    with pytest.raises(ValueError, match=r"SUM\(x\) needs a COUNT\(x\)"):
        ViewShape(key=("k",), groups=(), aggregates=(Aggregate("s", "sum", "x"),))
    assert ROWS == "_rows"
