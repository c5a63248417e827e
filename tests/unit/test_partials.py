"""pushdown/partials.py: decimal partial sums handed to Spark in its input's DECIMAL(p, s)."""

from __future__ import annotations

import decimal

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY, agg, col, one_scan

from htap.pushdown import partials

D = decimal.Decimal
X, N = col("x", "decimal(4,2)"), col("n", "bigint")
# A partial aggregate per task (Node.partial): the grouping column, then the aggregates.
PLAN = one_scan(["g", "x", "n"], aggregate=[
    ("g", col("g", "string")), ("a0", agg("sum", X, type_="decimal(4,2)")), ("a1", agg("count_star")),
    ("a2", agg("max", X, type_="decimal(4,2)")), ("a3", agg("sum", N)),
], group_by=[col("g", "string")])
OUTPUT = pa.schema([("g", pa.string()), ("a0", pa.decimal128(4, 2)), ("a1", pa.int64()), ("a2", pa.decimal128(4, 2)),
                    ("a3", pa.int64())])
WIDE = partials.wide(OUTPUT, partials.decimal_sums(PLAN, OUTPUT))


def test_a_38_digit_sum_passes_unchanged():
    # TPC-H Q1's charge: Spark's type of the product is DECIMAL(38,6), so is the partial sum's.
    sp = one_scan(["x"], aggregate=[("a0", agg("sum", col("x", "decimal(28,6)"), type_="decimal(38,6)"))])
    out = pa.schema([("a0", pa.decimal128(38, 6))])
    assert partials.decimal_sums(sp, out) == []
    value = D("12345678901234567890123456789012.123456")
    batch = pa.RecordBatch.from_pylist([{"a0": value}], schema=out)
    assert [b.to_pylist() for b in partials.fit(batch, sp, out)] == [[{"a0": value}]]
    with decimal.localcontext(decimal.Context(prec=28)):  # Python's default: 28 digits
        assert partials._largest(pa.decimal128(37, 6)) == D("9999999999999999999999999999999.999999")


def test_only_decimal_sums_are_widened():
    assert partials.decimal_sums(PLAN, OUTPUT) == [1]
    assert WIDE.field(1).type == pa.decimal128(38, 2) and WIDE.field(3).type == pa.decimal128(4, 2)


def test_a_complete_aggregate_or_a_row_scan_has_no_partial_sums():
    # A complete aggregate is final (Spark's own, wider SUM type); rows are not sums.
    complete = one_scan(PLAN.scans[0].columns, aggregate=PLAN.root.exprs, group_by=PLAN.root.group_by, partial=False,
                        split=None)
    assert partials.decimal_sums(complete, OUTPUT) == []
    rows = one_scan(["g", "x"])
    out = pa.schema([("g", pa.string()), ("x", pa.decimal128(4, 2))])
    assert partials.decimal_sums(rows, out) == []
    batch = pa.RecordBatch.from_pylist([{"g": "a", "x": D("1.00")}], schema=out)
    assert [b.to_pylist() for b in partials.fit(batch, rows, out) if b.num_rows] == [[{"g": "a", "x": D("1.00")}]]


def test_grouping_columns_after_the_sums_keep_their_values_in_split_rows():
    # The aggregate's outputs in any order: a grouping column after a SUM is a key, not neutral.
    plan = one_scan(["g", "x"], aggregate=[("a0", agg("sum", X, type_="decimal(4,2)")), ("g", col("g", "string")),
                                           ("a1", agg("count_star")), ("a2", agg("min", X, type_="decimal(4,2)"))],
                    group_by=[col("g", "string")])
    out = pa.schema([("a0", pa.decimal128(4, 2)), ("g", pa.string()), ("a1", pa.int64()), ("a2", pa.decimal128(4, 2))])
    assert partials.decimal_sums(plan, out) == [0]
    wide = partials.wide(out, [0])
    batch = pa.RecordBatch.from_pylist([{"a0": D("250.00"), "g": "k", "a1": 3, "a2": D("-1.00")}], schema=wide)
    rows = pa.Table.from_batches(list(partials.fit(batch, plan, out)), schema=out).to_pylist()
    assert all(r["g"] == "k" for r in rows) and sum(r["a0"] for r in rows) == D("250.00")
    assert all(abs(r["a0"]) <= D("99.99") for r in rows)
    assert sum(r["a1"] for r in rows) == 3 and [r["a2"] for r in rows if r["a2"] is not None] == [D("-1.00")]


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from("abc"), st.none() | st.decimals(-10**5, 10**5, places=2)), max_size=8))
def test_split_sums_add_up_and_fit(rows):
    batch = pa.RecordBatch.from_pylist(
        [{"g": g, "a0": s, "a1": 5, "a2": D("1.00"), "a3": 7} for g, s in rows], schema=WIDE
    )
    out = pa.Table.from_batches(list(partials.fit(batch, PLAN, OUTPUT)), schema=OUTPUT).to_pylist()
    limit = D("99.99")
    assert all(r["a0"] is None or abs(r["a0"]) <= limit for r in out)
    for column, want in (("a0", lambda r: r["a0"]), ("a1", lambda r: 5), ("a3", lambda r: 7)):
        got: dict = {}
        expected: dict = {}
        for r in out:
            if r[column] is not None:
                got[r["g"]] = got.get(r["g"], 0) + r[column]
        for g, s in rows:
            value = want({"a0": s})
            if value is not None:
                expected[g] = expected.get(g, 0) + value
        assert got == expected, column
    assert {(r["g"], r["a2"]) for r in out if r["a2"] is not None} == {(g, D("1.00")) for g, _ in rows}
    assert len([r for r in out if r["a2"] is not None]) == len(rows)  # MIN/MAX rows are not repeated
