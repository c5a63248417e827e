"""Key ranges as pushed-plan conjuncts: parallel source reads (pushdown/source_reader.source_ranges)
and data verification's ranges (verify/data.KeyRange.predicates). Each range is `lo <= key < hi`
on the first key column: run in DuckDB, the ranges split a table's rows exactly, and the model
(unit_support.evaluate) agrees."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from sqlglot import exp
from unit_support import UTC, cmp, make_table, matches, one_scan

from htap import engine
from htap.pushdown import source_reader
from htap.rewrite import render
from htap.rewrite.dialects import REPLICA
from htap.rewrite.pushed import PushedPlan, to_json
from htap.verify.data import KeyRange

D = decimal.Decimal
KEYS = {
    "bigint": (pa.int64(), [-5, 0, 3, 9, 10, 11, 40], [3, 10]),
    "int": (pa.int32(), [1, 2, 3, 4], [2]),
    "string": (pa.string(), ["", "A", "a", "b", "ba", "z"], ["a", "b"]),
    "date": (pa.date32(), [dt.date(2023, 12, 31), dt.date(2024, 1, 1), dt.date(2024, 6, 1)], [dt.date(2024, 1, 1)]),
    "timestamp": (pa.timestamp("us", tz="UTC"),
                  [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)],
                  [dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)]),
    "decimal": (pa.decimal128(12, 2), [D("-1.00"), D("0.50"), D("0.51"), D("7.25")], [D("0.51")]),
}


def rows_in(con, plan: PushedPlan) -> list:
    relation = render.scan_select(plan.scans[0], exp.to_table("k"))
    return sorted(r[0] for r in con.sql(render.render_plan(plan, [relation]).sql(REPLICA)).fetchall())


@pytest.fixture
def con():
    c = engine.cursor()
    yield c
    c.close()


class FakeQueryable:
    def __init__(self, points):
        self.points = points

    def split_points(self, table, range_rows):
        return self.points


@pytest.mark.parametrize("name", list(KEYS))
def test_source_ranges_split_the_rows_exactly(con, monkeypatch, name):
    t, values, points = KEYS[name]
    table = make_table([("id", t), ("v", pa.int64())])
    con.register("k", pa.table({"id": pa.array(values, t), "v": pa.array(range(len(values)), pa.int64())}))
    monkeypatch.setattr(source_reader, "open_queryable", lambda source: FakeQueryable(points))
    plan = one_scan(["id", "v"], table=table.qualified_name)
    ranges = source_reader.source_ranges(None, table, plan, 1000)
    assert len(ranges) == len(points) + 1
    got = [rows_in(con, r) for r in ranges]
    assert sorted(x for part in got for x in part) == sorted(values)  # every row in exactly one range
    edges = [None, *points, None]
    for part, lo, hi in zip(got, edges, edges[1:]):
        assert part == sorted(v for v in values if (lo is None or v >= lo) and (hi is None or v < hi))
    for r in ranges:  # the plan above the scan is unchanged; each range is JSON the executors parse
        assert r.root == plan.root and PushedPlan.from_json(to_json(r)) == r


def test_source_ranges_add_to_the_scans_own_filter(con, monkeypatch):
    table = make_table([("id", pa.int64()), ("v", pa.int64())])
    con.register("k", pa.table({"id": list(range(10)), "v": list(range(10))}))
    monkeypatch.setattr(source_reader, "open_queryable", lambda source: FakeQueryable([5]))
    odd = cmp("eq", "v", "long", 3)
    plan = one_scan(["id"], (odd,), table=table.qualified_name)
    low, high = source_reader.source_ranges(None, table, plan, 1000)
    assert low.scans[0].filter[0] == odd and high.scans[0].filter[0] == odd
    assert rows_in(con, low) == [3] and rows_in(con, high) == []


def test_without_split_points_the_plan_is_read_whole(monkeypatch):
    table = make_table()
    plan = one_scan(["id", "v"])
    monkeypatch.setattr(source_reader, "open_queryable", lambda source: FakeQueryable([]))
    assert source_reader.source_ranges(None, table, plan, 1000) == [plan]


@pytest.mark.parametrize("name", list(KEYS))
def test_verify_key_ranges_are_half_open_and_the_model_agrees(con, name):
    t, values, points = KEYS[name]
    con.register("k", pa.table({"id": pa.array(values, t)}))
    edges = [None, *points, None]
    seen = []
    for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
        conjuncts = KeyRange(i, lo, hi).predicates("id", t)
        assert len(conjuncts) == (lo is not None) + (hi is not None)
        got = rows_in(con, one_scan(["id"], conjuncts, table="s.k"))
        assert got == sorted(v for v in values if (lo is None or v >= lo) and (hi is None or v < hi))
        assert got == sorted(v for v in values if matches(conjuncts, {"id": v}))
        seen += got
    assert sorted(seen) == sorted(values)
