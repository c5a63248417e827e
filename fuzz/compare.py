"""Comparing query results: as multisets of rows, or in order where the query's ORDER BY is a
total order.

Results are taken from Spark as Arrow (`DataFrame.toArrow()`), not as Python Rows: dates and
timestamps are compared as their day and microsecond counts, so values beyond Python's datetime
range (year 10000 after a date_add) compare like any other instead of failing the conversion.

Decimals, strings, booleans, dates and timestamps compare exactly; so do the result's column
types. Only float and double columns get a tolerance: -0.0 equals 0.0 and NaN equals NaN (Spark
itself treats them so in grouping, joins and sorting), and values equal within a relative 1e-9
are equal, because Spark's own double SUM and AVG depend on the order in which rows are added
(partial aggregates per partition, merged in task-completion order): two correct engines may
differ in the last bits. The data keeps such differences rare (doubles are mostly multiples of
1/8, whose sums are exact in any order).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

REL_TOL = 1e-9


@dataclass
class Table:
    """A result as rows of comparable Python values, with its Arrow column types."""

    rows: list[tuple]
    types: list[str]
    floats: list[bool]  # per column: compared with tolerance


def from_arrow(t: pa.Table) -> Table:
    cols, types, floats = [], [], []
    for col in t.columns:
        typ = col.type
        types.append(str(typ))
        floats.append(pa.types.is_floating(typ))
        if pa.types.is_date32(typ):
            col = pc.cast(col, pa.int32())
        elif pa.types.is_timestamp(typ):
            col = pc.cast(col.cast(pa.timestamp("us", tz=typ.tz)), pa.int64())
        elif pa.types.is_floating(typ):
            col = pc.cast(col, pa.float64())
        values = col.to_pylist()
        if pa.types.is_floating(typ):
            values = [0.0 if v == 0 else v for v in values]  # -0.0 -> 0.0
        cols.append(values)
    rows = list(zip(*cols)) if cols else []
    if not cols:
        rows = [()] * t.num_rows
    return Table(rows, types, floats)


def _key(v: object) -> tuple:
    """A sort key over mixed values: None first, NaN after numbers, floats rounded to 9 digits so
    that values within the tolerance usually sort to the same place."""
    if v is None:
        return (0, "")
    if isinstance(v, float):
        if v != v:
            return (2, "")
        return (1, float(f"{v:.9g}")) if not math.isinf(v) else (1, v)
    if isinstance(v, bool):
        return (1, int(v))
    if isinstance(v, (int,)):
        return (1, v)
    return (3, str(type(v)), v)


def row_key(r: tuple) -> tuple:
    return tuple(_key(v) for v in r)


def _same_value(a: object, b: object, is_float: bool) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if is_float:
        if a != a or b != b:
            return a != a and b != b
        return a == b or math.isclose(a, b, rel_tol=REL_TOL)
    return a == b


def _same_row(a: tuple, b: tuple, floats: list[bool]) -> bool:
    return all(_same_value(x, y, f) for x, y, f in zip(a, b, floats))


@dataclass
class Difference:
    what: str  # "types", "row count", "rows"
    only_left: list[tuple]
    only_right: list[tuple]
    detail: str = ""


def compare(left: Table, right: Table, ordered: bool) -> Difference | None:
    """None when equal; else what differs (a few rows of each side that the other lacks)."""
    if left.types != right.types:
        return Difference("types", [], [], f"{left.types} vs {right.types}")
    floats = left.floats
    a, b = left.rows, right.rows
    if not ordered:
        a, b = sorted(a, key=row_key), sorted(b, key=row_key)
    if len(a) == len(b) and all(_same_row(x, y, floats) for x, y in zip(a, b)):
        return None
    if not ordered and len(a) == len(b) and any(floats) and _match_with_tolerance(a, b, floats):
        return None
    only_a, only_b = _unmatched(a, b, floats)
    what = "row count" if len(a) != len(b) else ("row order" if ordered and not only_a and not only_b else "rows")
    detail = f"{len(a)} vs {len(b)} rows"
    if what == "row order":
        first = next(i for i, (x, y) in enumerate(zip(a, b)) if not _same_row(x, y, floats))
        detail += f"; first difference at row {first}: {a[first]!r} vs {b[first]!r}"
    return Difference(what, only_a, only_b, detail)


def _match_with_tolerance(a: list[tuple], b: list[tuple], floats: list[bool]) -> bool:
    """Whether every row of `a` has its own row of `b` equal within the tolerance (a greedy
    matching: rows near a rounding boundary of the sort key may sort apart)."""
    return not any(_unmatched(a, b, floats))


def _unmatched(a: list[tuple], b: list[tuple], floats: list[bool]) -> tuple[list[tuple], list[tuple]]:
    """Rows of `a` with no equal row in `b`, and the reverse (multiset semantics)."""
    if not any(floats):
        ca, cb = Counter(map(row_key, a)), Counter(map(row_key, b))
        by_key_a = {row_key(r): r for r in a}
        by_key_b = {row_key(r): r for r in b}
        only_a = [by_key_a[k] for k in (ca - cb).elements()]
        only_b = [by_key_b[k] for k in (cb - ca).elements()]
        return only_a, only_b
    pool = list(b)
    only_a = []
    for r in a:
        for i, s in enumerate(pool):
            if _same_row(r, s, floats):
                pool.pop(i)
                break
        else:
            only_a.append(r)
    return only_a, pool


def show(rows: list[tuple], limit: int = 5, width: int = 300) -> str:
    out = []
    for r in rows[:limit]:
        text = repr(r)
        out.append(text if len(text) <= width else text[: width - 3] + "...")
    if len(rows) > limit:
        out.append(f"... ({len(rows) - limit} more)")
    return "\n".join("      " + line for line in out)
