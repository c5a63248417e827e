"""Spark's AVG of decimals, for tests of its pushed form (htap.rewrite.render `divide`): the plan
expression the shim sends for it, Spark's own steps in Python's decimal module, and values to try."""

from __future__ import annotations

from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, localcontext

from hypothesis import strategies as st


def op(name: str, *args: dict, type: str = "boolean") -> dict:
    return {"op": name, "type": type, "args": list(args)}


def avg_of(arg: dict, p: int, s: int) -> dict:
    """Spark's AVG of a decimal(p, s) as the shim sends it: its sum in decimal(p + 10, s)
    over its count as decimal(20, 0), divided to decimal(p + 4, s + 4)."""
    total = {"agg": "sum", "distinct": False, "type": f"decimal({min(p + 10, 38)},{s})", "args": [arg]}
    count = {"agg": "count", "distinct": False, "type": "bigint", "args": [arg]}
    return op("/", total, op("cast", count, type="decimal(20,0)"), type=f"decimal({p + 4},{s + 4})")


def spark_avg(values: list[Decimal | None], p: int, s: int) -> Decimal | None:
    """Spark's avg of decimal(p, s) values, step by step (Average.evaluateExpression): the exact
    sum (decimal(p + 10, s)), then DecimalDivideWithOverflowCheck — Decimal's `/`, i.e.
    BigDecimal.divide(count, scale 39, ROUND_DOWN), then toPrecision(p + 4, s + 4, HALF_UP)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    with localcontext() as ctx:
        ctx.prec = 200  # exact: Python's default 28 digits would round the sum
        ctx.rounding = ROUND_DOWN  # the quotient's 200th digit: no carry into the 39th
        total = sum(present, Decimal(0))
        truncated = (total / Decimal(len(present))).quantize(Decimal(1).scaleb(-39), rounding=ROUND_DOWN)
        return truncated.quantize(Decimal(1).scaleb(-(s + 4)), rounding=ROUND_HALF_UP)


def unscaled_decimals(p: int, s: int):
    """decimal(p, s) values: any, and the largest, ties (...5) and the smallest steps often."""
    bound = 10**p - 1
    edge = st.sampled_from([bound, -bound, 5, -5, 1, -1, 0, 10**(p - 1) + 5])  # ties and extremes
    unscaled = st.one_of(edge, st.integers(-bound, bound))
    return unscaled.map(lambda u: Decimal(f"{u}E-{s}"))  # exact (scaleb rounds to 28 digits)
