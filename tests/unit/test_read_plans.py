"""replica/read_plans.py: read strategies, per-partition read plans, the queryable window (with a
fake metadata store: only the three methods these functions call)."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest
from unit_support import cmp, col, in_, make_delta, make_table, op, value

from htap.errors import ReplicaError
from htap.replica.models import STATE_CATCHING_UP, STATE_UNHEALTHY
from htap.replica.read_plans import (
    OutsideWindow,
    ReadPlan,
    Window,
    pin_and_plan,
    plan_reads,
    queryable_window,
    read_strategy,
    seq_for_time,
)

# --- read_strategy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,ds,expected",
    [
        ("no deltas", [], "merge"),
        ("one delta, unique keys", [make_delta(1, 5, unique_keys=True)], "direct"),
        ("one delta, repeated keys", [make_delta(1, 5)], "merge"),
        ("one unique delta with partial rows", [make_delta(1, 5, unique_keys=True, partial_rows=1)], "merge"),
        ("base and newer deltas", [make_delta(1, 5, unique_keys=True), make_delta(6, 9), make_delta(7, 8)], "base"),
        ("newer deltas may repeat keys and delete", [make_delta(1, 5, unique_keys=True), make_delta(6, 9, deletes=3)], "base"),
        ("base not unique", [make_delta(1, 5), make_delta(6, 9)], "merge"),
        ("a newer delta overlaps the base's seqs", [make_delta(1, 5, unique_keys=True), make_delta(5, 9)], "merge"),
        ("a newer delta older than the base", [make_delta(3, 5, unique_keys=True), make_delta(1, 2)], "merge"),
        ("partial rows in a newer delta", [make_delta(1, 5, unique_keys=True), make_delta(6, 9, partial_rows=2)], "merge"),
        ("partial rows in the base", [make_delta(1, 5, unique_keys=True, partial_rows=1), make_delta(6, 9)], "merge"),
    ],
)
def test_read_strategy(case, ds, expected):
    assert read_strategy(ds) == expected


# --- plan_reads ---------------------------------------------------------------------------------


def test_one_partition_selects_deltas_by_seq_and_floor_in_seq_order():
    t = make_table()
    a = make_delta(1, 10, id=1, path="a")
    b = make_delta(11, 20, id=2, path="b")
    c = make_delta(21, 30, id=3, path="c")
    d = make_delta(5, 25, id=4, path="d")  # overlaps (a compaction of a newer run)
    assert plan_reads(t, [c, b, a, d], 30, None) == [
        ReadPlan(part=0, seq=30, delta_paths=("a", "d", "b", "c"), floor=None, partial=False, strategy="merge",
                 delta_versions=(1, 1, 1, 1), files=(("a", None), ("d", None), ("b", None), ("c", None)),
                 seq_filter=False, deletes=False)
    ]
    [plan] = plan_reads(t, [c, b, a, d], 15, None)
    assert plan.delta_paths == ("a", "d", "b")  # c starts after seq 15
    [plan] = plan_reads(t, [c, b, a, d], 15, 11)
    assert plan.delta_paths == ("d", "b")  # a ends before the floor
    assert plan.floor == 11 and plan.seq == 15
    [plan] = plan_reads(t, [c, b, a, d], 10, 10)
    assert plan.delta_paths == ("a", "d")  # both bounds are inclusive


def test_a_plan_filters_seqs_and_deletes_only_where_a_delta_can_hold_a_row_they_drop():
    t = make_table()
    a = make_delta(1, 10, id=1, path="a")
    b = make_delta(11, 20, id=2, path="b")
    [plan] = plan_reads(t, [a, b], 20, None)
    assert (plan.seq_filter, plan.deletes) == (False, False)  # every version is visible, none deletes
    [plan] = plan_reads(t, [a, b], 15, None)
    assert plan.seq_filter  # b holds versions after seq 15
    [plan] = plan_reads(t, [a, b], 20, 5)
    assert plan.seq_filter  # a holds versions below the floor
    [plan] = plan_reads(t, [a, b], 20, 1)
    assert not plan.seq_filter  # the floor is inclusive
    [plan] = plan_reads(t, [a, dataclasses.replace(b, deletes=1)], 20, None)
    assert plan.deletes and not plan.seq_filter


def test_a_plan_names_every_file_with_its_checksum():
    t = make_table()
    a = dataclasses.replace(make_delta(1, 10, id=1, path="a"), checksum="ca", dv_checksum="cs")
    b = dataclasses.replace(make_delta(11, 20, id=2, path="b"), checksum="cb")  # no sidecar
    [plan] = plan_reads(t, [a, b], 20, None)
    assert dict(plan.files) == {"a": "ca", "a.dv": "cs", "b": "cb"}
    assert pickle.loads(pickle.dumps(plan)) == plan  # sent to executors


def test_equal_min_seqs_are_ordered_by_id():
    t = make_table()
    x, y = make_delta(3, 4, id=9, path="x"), make_delta(3, 9, id=2, path="y")
    assert plan_reads(t, [x, y], 9, None)[0].delta_paths == ("y", "x")


def test_partial_and_strategy_follow_the_chosen_deltas():
    t = make_table()
    base = make_delta(1, 10, unique_keys=True, path="base")
    partial_newer = make_delta(11, 20, partial_rows=1, path="p")
    [plan] = plan_reads(t, [base, partial_newer], 10, None)
    assert (plan.delta_paths, plan.partial, plan.strategy) == (("base",), False, "direct")
    [plan] = plan_reads(t, [base, partial_newer], 20, None)
    assert (plan.partial, plan.strategy) == (True, "merge")


def test_every_matching_partition_gets_a_plan_even_without_deltas():
    t = make_table(splits=[100, 200])
    ds = [make_delta(1, 5, part=0, path="p0"), make_delta(1, 5, part=2, path="p2a"), make_delta(6, 9, part=2, path="p2b")]
    plans = plan_reads(t, ds, 9, None)
    assert [(p.part, p.delta_paths) for p in plans] == [(0, ("p0",)), (1, ()), (2, ("p2a", "p2b"))]


def test_key_filters_prune_partitions():
    t = make_table(splits=[100, 200])
    ds = [make_delta(1, 5, part=p, path=f"p{p}") for p in range(3)]
    eq = (cmp("eq", "id", "long", 150),)  # a scan's filter conjuncts (htap.rewrite.pushed)
    assert [p.part for p in plan_reads(t, ds, 9, None, eq)] == [1]
    many = (in_("id", ("long", 1), ("long", 250)),)
    assert [p.part for p in plan_reads(t, ds, 9, None, many)] == [0, 2]
    flipped = (op(">=", value("long", 199), col("id", "bigint")), cmp("ge", "id", "long", 100))  # 100 <= id <= 199
    assert [p.part for p in plan_reads(t, ds, 9, None, flipped)] == [1]
    other_column = (cmp("eq", "v", "string", "x"),)
    assert [p.part for p in plan_reads(t, ds, 9, None, other_column)] == [0, 1, 2]
    assert [p.part for p in plan_reads(t, ds, 9, None)] == [0, 1, 2]  # no filter


def test_schema_versions_of_deltas_and_columns_added_later():
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("w", pa.int32()), ("x", pa.bool_())])
    t = make_table(schema, added={"w": 2, "x": 3}, schema_version=3)
    ds = [make_delta(1, 5, schema_version=1, path="old"), make_delta(6, 9, schema_version=3, path="new")]
    [plan] = plan_reads(t, ds, 9, None)
    assert plan.delta_versions == (1, 3)
    assert plan.added_versions == (("w", 2), ("x", 3))


# --- the queryable window (fake store) ------------------------------------------------------------


class FakeStore:
    """The metadata store calls the window and pinning need: a clock, safe points, pins, truncations."""

    def __init__(self, now: float, safe_points: list[tuple[float, int]], deltas=(), truncations=()):
        self.now = now
        self.safe_points = safe_points  # (at, seq)
        self._deltas = list(deltas)
        self.truncations = list(truncations)  # seqs
        self.pins = []

    def clock(self):
        return self.now

    def seq_at(self, source, at):
        seqs = [s for a, s in self.safe_points if a <= at]
        return max(seqs) if seqs else None

    def lease(self, table_id, seq, ttl_s, holder=None):
        self.pins.append((table_id, seq, ttl_s))
        return len(self.pins), list(self._deltas)

    def truncated_at(self, table_id, seq):
        seqs = [s for s in self.truncations if s <= seq]
        return max(seqs) if seqs else None

    def layout_at(self, table_id, seq):
        return None  # never repartitioned: the table's current layout


def test_window_runs_from_the_seq_reached_window_s_ago_to_the_max_safe_seq():
    store = FakeStore(1000.0, [(100.0, 10), (500.0, 40), (900.0, 80)])
    t = make_table(copy_seq=5, max_safe_seq=90)
    assert queryable_window(store, t, 600.0) == Window(10, 90)  # at 400 the source had reached 10
    assert queryable_window(store, t, 100.0) == Window(80, 90)
    assert queryable_window(store, t, 10_000.0) == Window(5, 90)  # nothing that old: the copy seq
    assert queryable_window(store, t, 600.0, now=1100.0) == Window(40, 90)


def test_window_never_starts_below_the_initial_copy_or_above_the_max_safe_seq():
    store = FakeStore(1000.0, [(100.0, 10)])
    assert queryable_window(store, make_table(copy_seq=50, max_safe_seq=90), 600.0) == Window(50, 90)
    assert queryable_window(store, make_table(copy_seq=None, max_safe_seq=90), 600.0) == Window(10, 90)
    assert queryable_window(store, make_table(copy_seq=95, max_safe_seq=90), 600.0) == Window(90, 90)


@pytest.mark.parametrize("kw", [{"state": STATE_CATCHING_UP}, {"state": STATE_UNHEALTHY}, {"max_safe_seq": None}])
def test_an_unreadable_table_has_no_window(kw):
    assert queryable_window(FakeStore(1000.0, [(1.0, 1)]), make_table(**kw), 600.0) is None


def test_seq_for_time():
    store = FakeStore(1000.0, [(100.0, 10), (500.0, 40)])
    t = make_table()
    assert seq_for_time(store, t, 499.9) == 10
    assert seq_for_time(store, t, 500.0) == 40
    with pytest.raises(OutsideWindow, match="public.t has no replica state as old as 99.0"):
        seq_for_time(store, t, 99.0)


def test_pin_and_plan_pins_inside_the_window_and_plans_with_the_truncation_floor():
    ds = [make_delta(1, 10, path="old"), make_delta(20, 30, path="new")]
    store = FakeStore(1000.0, [(500.0, 10)], deltas=ds, truncations=[15, 25])
    t = make_table(copy_seq=0, max_safe_seq=30)
    plans = pin_and_plan(store, t, 22, 600.0, 60.0)
    assert store.pins == [(t.id, 22, 60.0)]
    assert [(p.delta_paths, p.floor) for p in plans] == [(("new",), 15)]


def test_pin_and_plan_refuses_seqs_outside_the_window_and_unreadable_tables():
    store = FakeStore(1000.0, [(300.0, 10)])
    t = make_table(copy_seq=0, max_safe_seq=30)
    with pytest.raises(OutsideWindow, match=r"seq 9 of public.t is outside its queryable window \[10, 30\]"):
        pin_and_plan(store, t, 9, 600.0, 60.0)
    with pytest.raises(OutsideWindow):
        pin_and_plan(store, t, 31, 600.0, 60.0)
    with pytest.raises(ReplicaError, match=r"not readable \(state: unhealthy; disk gone\)"):
        pin_and_plan(store, make_table(state=STATE_UNHEALTHY, error="disk gone"), 20, 600.0, 60.0)
    assert store.pins == []


def test_pin_and_plan_prunes_partitions_by_the_scans_filter():
    ds = [make_delta(1, 10, part=p, path=f"p{p}") for p in range(3)]
    store = FakeStore(1000.0, [(500.0, 10)], deltas=ds)
    t = make_table(copy_seq=0, max_safe_seq=30, splits=[100, 200])
    plans = pin_and_plan(store, t, 20, 600.0, 60.0, (cmp("ge", "id", "long", 200),), "driver-1")
    assert [p.part for p in plans] == [2] and store.pins == [(t.id, 20, 60.0)]
    assert [p.part for p in pin_and_plan(store, t, 20, 600.0, 60.0)] == [0, 1, 2]
