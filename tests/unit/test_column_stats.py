"""htap.replica.column_stats: a delta's column statistics are exact where they can be (bounds,
nulls; distinct values of a delta the sample covers whole), and a table's combine its deltas'
within what the deltas allow; the sampled distinct estimate lands near the truth."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from htap.replica import column_stats as cs
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, Column

values = st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(values, st.lists(st.booleans(), min_size=200, max_size=200))
def test_a_deltas_statistics_are_those_of_its_upsert_versions(column, deletes):
    ops = [OP_DELETE if d else OP_UPSERT for d in deletes[: len(column)]]
    data = pa.table({"v": pa.array(column, pa.int32()), "s": pa.array([None if v is None else str(v) for v in column]),
                     OP: pa.array(ops, pa.int8())})
    stats = cs.decode(cs.encode(cs.of_delta(data, ["v", "s", "missing"])))
    kept = [v for v, op in zip(column, ops) if op == OP_UPSERT]
    present = [v for v in kept if v is not None]
    assert set(stats) == {"v", "s"}
    v = stats["v"]
    assert v.nulls == len(kept) - len(present) == stats["s"].nulls
    assert (v.low, v.high) == ((min(present), max(present)) if present else (None, None))
    assert v.distinct == len(set(present)) == stats["s"].distinct
    assert (stats["s"].low, stats["s"].high) == (None, None)  # strings: no numeric range


def test_bounds_are_in_the_units_spark_literals_compare_in():
    data = pa.table({
        "d": pa.array([dt.date(1970, 1, 11), dt.date(1969, 12, 31)]),
        "t": pa.array([dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(1970, 1, 1)], pa.timestamp("ms", "UTC")),
        "m": pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(10, 2)),
        "b": pa.array([True, False]),
        "f": pa.array([float("nan"), 1.0]),
    })
    stats = cs.of_delta(data, data.column_names)
    assert (stats["d"].low, stats["d"].high) == (-1.0, 10.0)  # days since the epoch
    assert (stats["t"].low, stats["t"].high) == (0.0, 1e6)  # microseconds
    assert (stats["m"].low, stats["m"].high) == (-3.5, 1.25)
    assert (stats["b"].low, stats["b"].high) == (0.0, 1.0)
    assert (stats["f"].low, stats["f"].high) == (None, None)  # a NaN: no range to trust


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.integers(0, 50), st.integers(0, 500)), min_size=1, max_size=8),
       st.booleans())
def test_a_tables_statistics_stay_within_what_its_deltas_allow(deltas, partition):
    parts = []
    for rows, nulls, distinct in deltas:
        nulls = min(nulls, rows)
        distinct = min(distinct, rows - nulls)
        parts.append((rows, {"v": cs.ColumnStats(float(-distinct), float(distinct), nulls, distinct)}))
    (v,) = cs.combine([(r, cs.encode(s)) for r, s in parts], "v" if partition else None).values()
    total = sum(r for r, _ in parts)
    nulls = sum(s["v"].nulls for _, s in parts)
    assert v.nulls == nulls
    assert v.low == min(s["v"].low for _, s in parts) and v.high == max(s["v"].high for _, s in parts)
    summed = sum(s["v"].distinct for _, s in parts)
    if partition:
        assert v.distinct == min(summed, total - nulls)
    else:
        assert max(s["v"].distinct for _, s in parts) <= v.distinct <= summed
        assert v.distinct <= total - nulls


def test_deltas_without_statistics_leave_a_column_out_unless_most_rows_have_them():
    known = cs.encode({"v": cs.ColumnStats(0.0, 9.0, 0, 10)})
    assert "v" in cs.combine([(900, known), (100, None)], None)
    assert cs.combine([(100, known), (900, None)], None) == {}


def test_a_sampled_distinct_count_is_near_the_truth():
    rng = np.random.default_rng(7)
    n = 400_000  # well above the sample
    for distinct in (40, 5_000, 150_000):
        data = pa.table({"v": pa.array(rng.integers(0, distinct, n))})
        truth = len(np.unique(data.column("v").to_numpy()))
        estimate = cs.of_delta(data, ["v"])["v"].distinct
        assert truth / 1.3 <= estimate <= truth * 1.3, (distinct, truth, estimate)
    unique = pa.table({"v": pa.array(rng.permutation(n))})
    assert cs.of_delta(unique, ["v"])["v"].distinct == n


def test_overlapping_deltas_do_not_add_up_their_distinct_values():
    """Four deltas over the same 1,000 values (a non-partition column): about 1,000, not 4,000;
    four deltas of a key column's disjoint ranges: their sum."""
    rng = np.random.default_rng(3)
    parts = [(50_000, cs.encode(cs.of_delta(pa.table({"v": pa.array(rng.integers(0, 1000, 50_000))}), ["v"])))
             for _ in range(4)]
    assert 900 <= cs.combine(parts, None)["v"].distinct <= 1100
    keys = [(10_000, cs.encode(cs.of_delta(pa.table({"k": pa.array(np.arange(i * 10_000, (i + 1) * 10_000))}), ["k"])))
            for i in range(4)]
    assert cs.combine(keys, "k")["k"].distinct == cs.combine(keys, None)["k"].distinct == 40_000


def test_a_tables_statistics_follow_its_live_deltas(tmp_path):
    """Combined once per set of live deltas: a checkpoint's new delta changes them, the same
    deltas again give the kept answer; a delta without statistics counts only as rows."""
    store = MetadataStore(tmp_path / "m.db", create=True)
    t = store.add_table("src", "public", "t", [Column("id", "integer", False)], ["id"], "schema")
    first = cs.encode({"id": cs.ColumnStats(1.0, 100.0, 0, 100)})
    store.finish_copy(t.id, [NewDelta(t.id, "d0", 1, 1, 100, 1000, column_stats=first)], 1, None)
    store.commit_checkpoint("src", [], 5, 0.0)
    assert cs.of_table(store, t)["id"] == cs.ColumnStats(1.0, 100.0, 0, 100)
    assert cs.of_table(store, t) is cs.of_table(store, t)
    more = cs.encode({"id": cs.ColumnStats(101.0, 150.0, 0, 50)})
    store.commit_checkpoint("src", [NewDelta(t.id, "d1", 6, 6, 50, 500, column_stats=more),
                                    NewDelta(t.id, "d2", 7, 7, 10, 100)], 7, 1.0)
    assert cs.of_table(store, t)["id"] == cs.ColumnStats(1.0, 150.0, 0, 150)


def test_every_arrow_type_a_delta_can_hold_gets_statistics_or_none_never_an_error():
    """Statistics never stop a checkpoint: arrays, JSON-ish structs, maps, times, intervals and
    binaries are stored with what Arrow can count of them (Postgres int[] columns once failed a
    table: count_distinct has no kernel for lists)."""
    data = pa.table({
        "ints": pa.array([[1, 2], None, [3]], pa.list_(pa.int32())),
        "pair": pa.array([{"a": 1}, None, {"a": 2}], pa.struct([("a", pa.int64())])),
        "tags": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        "at": pa.array([dt.time(1, 2), None, dt.time(3, 4)], pa.time64("us")),
        "span": pa.array([1, None, 2], pa.duration("us")),
        "blob": pa.array([b"x", None, b"y"], pa.binary()),
        "big": pa.array([Decimal("1e30"), None, Decimal("-2")], pa.decimal256(40, 0)),
        "text": pa.array(["a", None, "a"], pa.large_string()),
    })
    stats = cs.of_delta(data, data.column_names)
    assert not {"ints", "pair", "tags"} & set(stats)
    assert stats["blob"] == cs.ColumnStats(None, None, 1, 2) and stats["text"].distinct == 1
    assert (stats["big"].low, stats["big"].high) == (-2.0, 1e30)
    assert cs.decode(cs.encode(stats)) == stats
