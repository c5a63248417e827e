"""pushdown/partials.py: decimal partial sums handed to Spark in its input's DECIMAL(p, s)."""

from __future__ import annotations

import decimal

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.pushdown import partials
from htap.rewrite.subplan import Aggregate, PushedSubplan

D = decimal.Decimal
SUBPLAN = PushedSubplan(
    group_by=("g",),
    aggregates=(Aggregate("sum", "x"), Aggregate("count_star"), Aggregate("max", "x"), Aggregate("sum", "n")),
)
OUTPUT = pa.schema([("g", pa.string()), ("a0", pa.decimal128(4, 2)), ("a1", pa.int64()), ("a2", pa.decimal128(4, 2)),
                    ("a3", pa.int64())])
WIDE = partials.wide(OUTPUT, partials.decimal_sums(SUBPLAN, OUTPUT))


def test_a_38_digit_sum_passes_unchanged():
    # TPC-H Q1's charge: Spark's type of the product is DECIMAL(38,6), so is the partial sum's.
    sp = PushedSubplan(aggregates=(Aggregate("sum", "x"),))
    out = pa.schema([("a0", pa.decimal128(38, 6))])
    assert partials.decimal_sums(sp, out) == []
    value = D("12345678901234567890123456789012.123456")
    batch = pa.RecordBatch.from_pylist([{"a0": value}], schema=out)
    assert [b.to_pylist() for b in partials.fit(batch, sp, out)] == [[{"a0": value}]]
    with decimal.localcontext(decimal.Context(prec=28)):  # Python's default: 28 digits
        assert partials._largest(pa.decimal128(37, 6)) == D("9999999999999999999999999999999.999999")


def test_only_decimal_sums_are_widened():
    assert partials.decimal_sums(SUBPLAN, OUTPUT) == [1]
    assert WIDE.field(1).type == pa.decimal128(38, 2) and WIDE.field(3).type == pa.decimal128(4, 2)


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from("abc"), st.none() | st.decimals(-10**7, 10**7, places=2)), max_size=8))
def test_split_sums_add_up_and_fit(rows):
    batch = pa.RecordBatch.from_pylist(
        [{"g": g, "a0": s, "a1": 5, "a2": D("1.00"), "a3": 7} for g, s in rows], schema=WIDE
    )
    out = pa.Table.from_batches(list(partials.fit(batch, SUBPLAN, OUTPUT)), schema=OUTPUT).to_pylist()
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
