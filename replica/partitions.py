"""Range partitions of a table on its first key column.

Split points are chosen from the initial copy (equal-count quantiles, so partitions start out
the same size) and stored as an Arrow array: partition i holds keys in [split[i-1], split[i]).
Every version of a key lives in one partition, so partitions are read, merged and compacted
independently — and Spark reads them in parallel. Keys compare as Postgres, DuckDB and Spark
order them: a double NaN is above every number (Arrow's comparisons would put it nowhere).
"""

from __future__ import annotations

import base64
import math

import duckdb
import pyarrow as pa
import pyarrow.compute as pc


def encode_bounds(splits: pa.Array) -> str:
    batch = pa.record_batch([splits], names=["split"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode()


def decode_bounds(b64: str | None) -> pa.Array | None:
    if not b64:
        return None
    reader = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(b64)))
    return reader.read_all().column("split").combine_chunks()


def partition_count(splits: pa.Array | None) -> int:
    return 1 if splits is None else len(splits) + 1


def choose_splits(con: duckdb.DuckDBPyConnection, relation: str, key0: str, rows: int, target_rows: int) -> pa.Array | None:
    """Equal-count split points over `key0` of `relation` for partitions of ~target_rows rows."""
    parts = max(1, math.ceil(rows / max(1, target_rows)))
    if parts == 1:
        return None
    fractions = ", ".join(str(i / parts) for i in range(1, parts))
    q = f'SELECT unnest(quantile_disc("{key0}", [{fractions}])) AS split FROM {relation}'
    splits = con.sql(q).to_arrow_table().column("split").combine_chunks()
    splits = pc.unique(splits)
    splits = pc.take(splits, pc.sort_indices(splits))
    return splits if len(splits) else None


def split_by_partition(data: pa.Table, key0: str, splits: pa.Array | None) -> list[tuple[int, pa.Table]]:
    """(partition, rows) for every partition that `data` has rows in (vectorized)."""
    if splits is None:
        return [(0, data)] if data.num_rows else []
    keys = data.column(key0)
    out = []
    for part in range(len(splits) + 1):
        mask = None
        if part > 0:
            mask = _at_or_above(keys, splits[part - 1])
        if part < len(splits):
            below = pc.invert(_at_or_above(keys, splits[part]))
            mask = below if mask is None else pc.and_(mask, below)
        rows = data.filter(mask)
        if rows.num_rows:
            out.append((part, rows))
    return out


def partition_filter(key0: str, splits: pa.Array | None, part: int):
    """A pyarrow.dataset filter selecting the rows of partition `part` (exactly those that
    split_by_partition puts there), or None when there is only one partition."""
    import pyarrow.dataset as ds

    if splits is None:
        return None
    key = ds.field(key0)
    floating = pa.types.is_floating(splits.type)

    def at_or_above(split: pa.Scalar):
        above = key >= split.as_py()
        return (above | pc.is_nan(key)) if floating else above

    conditions = []
    if part > 0:
        conditions.append(at_or_above(splits[part - 1]))
    if part < len(splits):
        conditions.append(~at_or_above(splits[part]))
    return conditions[0] if len(conditions) == 1 else conditions[0] & conditions[1]


def _at_or_above(keys, split: pa.Scalar):
    """keys >= split, with NaN above every number (and equal to itself)."""
    above = pc.greater_equal(keys, split)
    if pa.types.is_floating(keys.type):
        above = pc.or_(above, pc.is_nan(keys))
    return above


def matching_partitions(splits: pa.Array | None, key0: str, filters) -> list[int]:
    """Partitions whose key range can hold rows matching the conjunction `filters` (a pushed scan's
    filter, htap.rewrite.pushed expressions): `=`, IN and range comparisons of the first key
    column with literals prune; anything else, or a literal that does not convert exactly to the
    key's type, keeps every partition."""
    if splits is None:
        return [0]
    count = partition_count(splits)
    keep = set(range(count))
    for f in filters:
        bound = key_bound(f, key0)
        if bound is None:
            continue
        op, literals = bound
        parts = [_partition_of(splits, lit) for lit in literals]
        if any(p is None for p in parts):
            continue
        if op in ("=", "IN"):
            keep &= set(parts)
        elif op in (">", ">="):
            keep &= set(range(parts[0], count))
        else:
            keep &= set(range(0, parts[0] + 1))
    return sorted(keep)


_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def key_bound(conjunct, key0: str):
    """(op, literals) when `conjunct` compares column `key0` itself with literals — `key0 op lit`
    or `lit op key0` (flipped) for = < <= > >=, or `key0 IN (lits)` — else None."""
    if conjunct.form != "op" or not conjunct.args:
        return None
    args = conjunct.args
    if conjunct.name == "IN":
        if args[0].form == "col" and args[0].name == key0 and all(a.form == "lit" for a in args[1:]):
            return "IN", [a.value for a in args[1:]]
        return None
    if conjunct.name not in _FLIPPED or len(args) != 2:
        return None
    a, b = args
    if a.form == "col" and a.name == key0 and b.form == "lit":
        return conjunct.name, [b.value]
    if b.form == "col" and b.name == key0 and a.form == "lit":
        return _FLIPPED[conjunct.name], [a.value]
    return None


def _partition_of(splits: pa.Array, literal) -> int | None:
    """Index of the partition holding a pushed literal's value, or None if not comparable."""
    import datetime as dt

    value = literal.value
    if value is None:
        return None
    try:
        if literal.type == "timestamp":  # before year 1 it has no Python datetime (OverflowError)
            value = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(value))
        scalar = pa.scalar(value).cast(splits.type)  # safe cast: refuses lossy conversions
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    if pa.types.is_floating(splits.type) and math.isnan(scalar.as_py()):
        return len(splits)  # NaN is above every split point (a NaN split point included)
    return int(pc.sum(pc.less_equal(splits, scalar)).as_py() or 0)
