"""Partial sums of decimals in the type Spark will cast them to.

Spark merges a pushed partial `SUM` of a DECIMAL(p, s) input by casting every partial value to
DECIMAL(p, s), the input's own type, before summing (V2ScanRelationPushDown, "to keep the
dataType of Sum unchanged"). A partial sum that needs more integer digits than p - s would
overflow that cast (an error in ANSI mode, NULL otherwise), although Spark's own SUM, which
accumulates in DECIMAL(p + 10, s), gets it right. So the shim reports a pushed decimal SUM as
DECIMAL(p, s), and a partial sum too large for it is handed to Spark as several rows of the same
group, each within DECIMAL(p, s), whose other aggregates are neutral (COUNT 0, SUM/MIN/MAX NULL:
a SUM's neutral is NULL, not 0, or a group whose other SUM is NULL — no non-NULL input — would
sum to 0): Spark's final aggregation adds them up exactly as its own SUM would. The usual case — no
partial sum out of range — costs one vectorized comparison per batch.
"""

from __future__ import annotations

import decimal
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from htap.rewrite.pushed import PushedPlan

EXACT = decimal.Context(prec=80)  # Python's default context rounds to 28 digits


def decimal_sums(plan: PushedPlan, output: pa.Schema) -> list[int]:
    """Output positions of a partial aggregate's SUMs whose Spark type is a decimal of fewer than
    38 digits (a 38-digit sum is computed in 38 digits: it cannot exceed its type)."""
    node = plan.partial_aggregate()
    if node is None:
        return []  # a complete aggregate is final: reported in Spark's own (wider) SUM type
    return [
        i for i, (_name, e) in enumerate(node.exprs)
        if e.form == "agg" and e.name == "sum" and i < len(output) and pa.types.is_decimal(output.field(i).type)
        and output.field(i).type.precision < 38
    ]


def wide(output: pa.Schema, positions: list[int]) -> pa.Schema:
    """`output` with the decimal SUMs at `positions` widened to 38 digits (the sums as computed)."""
    fields = list(output)
    for i in positions:
        fields[i] = fields[i].with_type(pa.decimal128(38, output.field(i).type.scale))
    return pa.schema(fields)


def fit(batch: pa.RecordBatch, plan: PushedPlan, output: pa.Schema) -> Iterator[pa.RecordBatch]:
    """`batch` (the plan's result, positionally) as batches of `output`, decimal SUMs split
    into rows that fit their type."""
    positions = decimal_sums(plan, output)
    arrays = list(batch.columns)
    over = None
    for i in positions:
        t = output.field(i).type
        limit = pa.scalar(_largest(t), type=pa.decimal128(38, t.scale))
        column = arrays[i].cast(pa.decimal128(38, t.scale))
        arrays[i] = column
        # A NULL sum (no non-NULL input) is within range: NULL here would make the OR of every
        # sum's test NULL, and a row whose other sum overflows was cast as it was (fuzz seed 27
        # query 22: SUM(NULL::decimal(12,2)) beside SUM(10.50) over 121 rows).
        outside = pc.fill_null(pc.greater(pc.abs(column), limit), False)
        over = outside if over is None else pc.or_(over, outside)
    if over is None or not pc.any(over).as_py():
        yield _cast(arrays, output)
        return
    keep = pc.invert(over)
    yield _cast([pc.filter(a, keep) for a in arrays], output)
    yield _cast(_split(pa.RecordBatch.from_arrays([pc.filter(a, over) for a in arrays], names=output.names),
                       plan, output, positions), output)


def _largest(t: pa.Decimal128Type) -> decimal.Decimal:
    with decimal.localcontext(EXACT):
        return decimal.Decimal(10) ** (t.precision - t.scale) - decimal.Decimal(1).scaleb(-t.scale)


def _split(rows: pa.RecordBatch, plan: PushedPlan, output: pa.Schema, positions: list[int]) -> list[pa.Array]:
    """The (few) rows with a partial sum out of range, as rows that fit (one Python step per
    such group, never per table row): the group's keys in every row, neutral values (COUNT 0,
    SUM/MIN/MAX NULL) for its other aggregates in the added rows."""
    neutral: dict[int, object] = {}
    for i, (_name, e) in enumerate(plan.partial_aggregate().exprs):
        if e.form != "agg":
            continue  # a grouping column: kept
        neutral[i] = 0 if e.name in ("count", "count_star") else None
    out: list[list] = []
    with decimal.localcontext(EXACT):
        _split_rows(rows, output, positions, neutral, out)
    return [pa.array([r[j] for r in out], type=rows.schema.field(j).type) for j in range(rows.num_columns)]


def _split_rows(rows: pa.RecordBatch, output: pa.Schema, positions: list[int], neutral: dict,
                out: list[list]) -> None:
    for row in rows.to_pylist():
        values = list(row.values())
        extra = []
        for i in positions:
            total = values[i]
            limit = _largest(output.field(i).type)
            if total is None or abs(total) <= limit:
                continue
            step = limit if total > 0 else -limit
            while abs(total) > limit:
                chunk = [neutral[j] if j in neutral else values[j] for j in range(len(values))]
                chunk[i] = step
                extra.append(chunk)
                total -= step
            values[i] = total
        out.append(values)
        out.extend(extra)


def _cast(arrays: list[pa.Array], output: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, output)], schema=output
    )
