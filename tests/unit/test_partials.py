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


def spark_final_sum(values) -> object:
    """Spark's final SUM over a group's partial values: NULL when none is non-NULL."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from("abc"), st.none() | st.decimals(-10**5, 10**5, places=2),
                          st.none() | st.integers(-9, 9)), max_size=8))
def test_split_rows_leave_every_aggregate_of_the_group_as_it_was(rows):
    """After the split, Spark's final aggregation of every column gives what it gives over the
    rows before: sums add up and fit, a SUM with no non-NULL partial stays NULL (fuzz seed 21
    query 135: a neutral 0 made it 0.0), COUNT adds up, MIN/MAX rows are not repeated."""
    batch = pa.RecordBatch.from_pylist(
        [{"g": g, "a0": s, "a1": 5, "a2": D("1.00"), "a3": n} for g, s, n in rows], schema=WIDE
    )
    out = pa.Table.from_batches(list(partials.fit(batch, PLAN, OUTPUT)), schema=OUTPUT).to_pylist()
    limit = D("99.99")
    assert all(r["a0"] is None or abs(r["a0"]) <= limit for r in out)
    before = [{"g": g, "a0": s, "a1": 5, "a3": n} for g, s, n in rows]
    for column in ("a0", "a1", "a3"):
        for g in {g for g, _, _ in rows}:
            got = spark_final_sum(r[column] for r in out if r["g"] == g)
            want = spark_final_sum(r[column] for r in before if r["g"] == g)
            assert got == want, (column, g)
    assert {(r["g"], r["a2"]) for r in out if r["a2"] is not None} == {(g, D("1.00")) for g, _, _ in rows}
    assert len([r for r in out if r["a2"] is not None]) == len(rows)  # MIN/MAX rows are not repeated


def test_a_null_sum_beside_one_out_of_range_still_splits_it():
    """SUM(NULL::decimal(12,2)) beside SUM(10.50) over 121 rows (fuzz seed 27 query 22): the NULL
    sum's range test is not a NULL that hides the other's overflow (it failed the cast)."""
    y = col("y", "decimal(12,2)")
    sp = one_scan(["x", "y"], aggregate=[("a0", agg("sum", y, type_="decimal(12,2)")),
                                         ("a1", agg("sum", X, type_="decimal(4,2)"))])
    out = pa.schema([("a0", pa.decimal128(12, 2)), ("a1", pa.decimal128(4, 2))])
    batch = pa.RecordBatch.from_pylist([{"a0": None, "a1": D("1270.50")}], schema=partials.wide(out, [0, 1]))
    rows = [r for b in partials.fit(batch, sp, out) for r in b.to_pylist()]
    assert all(r["a0"] is None for r in rows) and sum(r["a1"] for r in rows) == D("1270.50")
    assert all(abs(r["a1"]) <= D("99.99") for r in rows)
