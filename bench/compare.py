"""Are two query results equal? Decimals and integers exactly, floats with a tolerance.

Results of a query with ORDER BY are compared in order; if only the order differs, the rows are
the same multiset and both engines sorted them by the same ORDER BY, so the difference can only be
among rows with equal sort keys — reported as equal, with a note. Other results are compared as
multisets.
"""

from __future__ import annotations

import math
from decimal import Decimal

REL_TOL = 1e-9
ABS_TOL = 1e-9


def values_equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        # A decimal against a float (Spark's AVG of a decimal is a DECIMAL rounded to its scale,
        # DuckDB's a DOUBLE): equal within half a unit of the decimal's last digit.
        dec = a if isinstance(a, Decimal) else b if isinstance(b, Decimal) else None
        unit = 0.0 if dec is None or not dec.is_finite() else 0.5 * 10.0 ** dec.as_tuple().exponent
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=max(ABS_TOL, unit * (1 + 1e-9)))
    if isinstance(a, (Decimal, int)) and isinstance(b, (Decimal, int)):
        return Decimal(a) == Decimal(b)
    return a == b


def rows_equal(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))


def _sort_key(row: tuple):
    return tuple((0, 0) if v is None else (1, round(v, 6) if isinstance(v, float) else v) for v in row)


def compare(expected: list[tuple], actual: list[tuple], ordered: bool) -> str | None:
    """None when equal (see the module doc), else what differs, in one line."""
    if len(expected) != len(actual):
        return f"{len(actual)} rows instead of {len(expected)}"
    if ordered and all(rows_equal(x, y) for x, y in zip(expected, actual)):
        return None
    exp_sorted, act_sorted = sorted(expected, key=_sort_key), sorted(actual, key=_sort_key)
    for x, y in zip(exp_sorted, act_sorted):
        if not rows_equal(x, y):
            return f"row {_short(y)} where {_short(x)} was expected"
    return None


def order_note(expected: list[tuple], actual: list[tuple]) -> str | None:
    """A note when equal results came back in a different order (ties of the sort keys)."""
    if any(not rows_equal(x, y) for x, y in zip(expected, actual)):
        return "same rows; order differs only among rows with equal sort keys"
    return None


def _short(row: tuple) -> str:
    text = repr(row)
    return text if len(text) <= 200 else text[:200] + "...)"
