"""Column statistics of deltas and of whole tables: what Spark's planner and the split rule use
to estimate how many rows a pushed filter keeps (issue 30, item 2).

Each delta records, per column, the low and high value (numbers, dates as days and timestamps as
microseconds since the epoch, booleans as 0/1; none for strings and binaries), the nulls, and an
estimate of its distinct values — computed when the delta is written, from the Arrow rows in
hand (a strided sample for the distinct count, so that a 60M-row initial copy pays little). A
table's statistics combine its live deltas' (`combine`): the lowest low, the highest high, the
sum of the nulls, and a distinct count that knows deltas of one table overlap in every column but
the partition column (whose key ranges are disjoint).

These are estimates for planning, never for answers: nothing reads them to decide which rows
a query returns.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from htap.replica.models import OP, OP_DELETE

# Rows of a delta the distinct count looks at (evenly spread over it): pyarrow's count_distinct
# over a 64k-row sample costs well under a millisecond per column.
SAMPLE_ROWS = 64 * 1024


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics over some rows. `low`/`high`: None when the type has no numeric
    order we report (strings, binaries) or every value is null."""

    low: float | None
    high: float | None
    nulls: int
    distinct: int  # estimated distinct non-null values

    def as_list(self) -> list:
        return [self.low, self.high, self.nulls, self.distinct]


def encode(stats: dict[str, ColumnStats]) -> str:
    """The JSON a delta's metadata row keeps: {column: [low, high, nulls, distinct]}."""
    return json.dumps({name: s.as_list() for name, s in stats.items()}, separators=(",", ":"))


def decode(text: str | None) -> dict[str, ColumnStats]:
    """`encode`'s inverse; {} for a delta written before statistics were kept."""
    if not text:
        return {}
    return {name: ColumnStats(v[0], v[1], int(v[2]), int(v[3])) for name, v in json.loads(text).items()}


def of_delta(data: pa.Table, columns: list[str]) -> dict[str, ColumnStats]:
    """Statistics of a delta's `columns` over its upsert versions (delete versions carry no
    values)."""
    if OP in data.column_names and pc.any(pc.equal(data.column(OP), OP_DELETE)).as_py():
        data = data.filter(pc.not_equal(data.column(OP), OP_DELETE))
    step = max(1, math.ceil(data.num_rows / SAMPLE_ROWS))
    sample = np.arange(0, data.num_rows, step) if step > 1 else None
    out = {}
    for name in columns:
        if name not in data.column_names or not _flat(data.schema.field(name).type):
            continue  # lists, structs, maps: no order, no distinct count worth an estimate
        column = data.column(name)
        nulls = column.null_count
        try:
            low, high = _bounds(column)
            values = column if sample is None else column.take(pa.array(sample))
            seen = len(values) - values.null_count
            distinct = pc.count_distinct(values).as_py() if seen else 0
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            continue  # a type Arrow cannot count or order: the column gets no estimate, the delta is stored
        out[name] = ColumnStats(low, high, nulls, _distinct(distinct, seen, data.num_rows - nulls))
    return out


def _flat(t: pa.DataType) -> bool:
    """A type of single values (not a list, struct, map or union)."""
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t))


def _bounds(column: pa.ChunkedArray) -> tuple[float | None, float | None]:
    """Low and high of a column in the units a Spark literal of its type compares in."""
    t = column.type
    if pa.types.is_boolean(t):
        column = column.cast(pa.int8())
    elif pa.types.is_date32(t):
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(t):
        column = column.cast(pa.timestamp("us", t.tz)).cast(pa.int64())
    elif pa.types.is_floating(t):
        if pc.any(pc.is_nan(column)).as_py():  # NaN sorts above every number in Spark: no high to trust
            return None, None
    elif not (pa.types.is_integer(t) or pa.types.is_decimal(t)):
        return None, None
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None or high is None:
        return None, None
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, None
    return low, high


def _distinct(seen_distinct: int, seen: int, total: int) -> int:
    """Distinct values among `total` non-null values, from `seen_distinct` among `seen` of
    them sampled evenly: the D that `seen` draws from D equally frequent values would show
    `seen_distinct` distinct ones (D (1 - e^(-seen/D)) = seen_distinct), at most `total`."""
    if seen >= total or seen_distinct == 0:
        return seen_distinct
    if seen_distinct >= 0.99 * seen:  # all but a few distinct: a key-like column
        return total
    return min(total, _solve(seen_distinct, seen))


def _solve(distinct: int, draws: int) -> int:
    """The D with D (1 - e^(-draws/D)) = distinct (distinct < draws), by bisection on log D."""
    lo, hi = math.log(distinct), math.log(distinct) + 40.0
    for _ in range(60):
        mid = (lo + hi) / 2
        d = math.exp(mid)
        if d * -math.expm1(-draws / d) < distinct:
            lo = mid
        else:
            hi = mid
    return max(distinct, round(math.exp(hi)))


def combine(deltas: list[tuple[int, str | None]], partition_column: str | None) -> dict[str, ColumnStats]:
    """A table's statistics from its live deltas' (rows, statistics as `encode` wrote them, None
    for a delta written before they were kept): a column is left out when deltas holding most of
    the rows have none for it. Distinct values: summed for the partition column (the deltas' key
    ranges do not overlap, up to versions of one key); otherwise at least the largest delta's and
    at most their sum — estimated from the largest delta as if its rows were drawn from the
    table's values. Vectorized over the deltas: a table may have thousands before compaction, and
    this runs when Spark plans a query over it."""
    total = sum(rows for rows, _ in deltas)
    decoded = [(rows, json.loads(text)) for rows, text in deltas if text]
    names = dict.fromkeys(name for _, stats in decoded for name in stats)
    out = {}
    for name in names:
        have = [(rows, stats[name]) for rows, stats in decoded if name in stats]
        rows = np.array([r for r, _ in have], dtype=np.int64)
        covered = int(rows.sum())
        if covered * 2 < total:
            continue
        lows = np.array([np.nan if v[0] is None else v[0] for _, v in have], dtype=np.float64)
        highs = np.array([np.nan if v[1] is None else v[1] for _, v in have], dtype=np.float64)
        nulls = np.array([v[2] for _, v in have], dtype=np.int64)
        distinct = np.array([v[3] for _, v in have], dtype=np.int64)
        summed = int(distinct.sum())
        if name == partition_column:
            estimate = summed
        else:
            largest = int(np.argmax(rows))
            non_null = int(rows[largest] - nulls[largest])
            d = int(distinct[largest])
            if d >= 0.99 * non_null:
                estimate = summed
            else:
                estimate = max(int(distinct.max()), min(_solve(d, non_null) if d else 0, summed))
        all_nulls = round(int(nulls.sum()) * (total / covered)) if covered else 0
        low = None if np.isnan(lows).all() else float(np.nanmin(lows))
        high = None if np.isnan(highs).all() else float(np.nanmax(highs))
        out[name] = ColumnStats(low, high, all_nulls, min(estimate, max(total - all_nulls, 0)))
    return out


# A planning process's (the driver's bridge) statistics per table, until its live deltas change:
# (store location, table id) -> ((live deltas, row versions, bytes), statistics).
_TABLES: dict[tuple[str, int], tuple[tuple[int, int, int], dict[str, ColumnStats]]] = {}
_TABLES_KEPT = 1024


def of_table(store, table, seen: tuple[int, int, int] | None = None) -> dict[str, ColumnStats]:
    """A table's statistics over its live deltas (`store`: an open MetadataStore, `table`: its
    TableInfo, `seen`: its `store.delta_stats` if just read); combined again only when a
    checkpoint or a compaction changed its deltas."""
    key, seen = (store.location, table.id), seen or store.delta_stats(table.id)
    kept = _TABLES.get(key)
    if kept is not None and kept[0] == seen:
        return kept[1]
    stats = combine(store.delta_column_stats(table.id), table.key[0] if table.key else None)
    if len(_TABLES) >= _TABLES_KEPT:
        _TABLES.clear()
    _TABLES[key] = (seen, stats)
    return stats
