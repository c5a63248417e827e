"""Shared helpers of the unit tier: TableInfo/Delta factories, literals, golden files, a
pure-Python model of SQL predicates (three-valued logic), and the property-test settings.

Nothing here starts a server: the unit tier runs on pure Python, pyarrow and in-process DuckDB.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, settings

from htap.connectors.tables import Column
from htap.replica.models import STATE_STREAMING, Delta, TableInfo, encode_schema
from htap.replica.partitions import encode_bounds
from htap.rewrite.subplan import Literal, Predicate

GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN_ENV = "HTAP_UPDATE_GOLDEN"  # `HTAP_UPDATE_GOLDEN=1 pytest tests/unit` rewrites the golden files

# Property tests: at least 100 examples here (the tier is fast), more with HYPOTHESIS_PROFILE=thorough.
PROPERTY = settings(
    max_examples=max(100, settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Properties whose examples each run several DuckDB queries (merge-on-read): fewer by default.
HEAVY_PROPERTY = settings(PROPERTY, max_examples=max(40, settings.default.max_examples))

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


# --- replica models --------------------------------------------------------------------------


def make_table(
    schema: pa.Schema | list[tuple[str, pa.DataType]] | None = None,
    key: tuple[str, ...] | list[str] = ("id",),
    *,
    id: int = 1,
    source: str = "src",
    db_schema: str = "public",
    name: str = "t",
    state: str = STATE_STREAMING,
    copy_seq: int | None = 0,
    max_safe_seq: int | None = 100,
    max_safe_time: float | None = 1_000.0,
    error: str | None = None,
    splits: list | None = None,
    failover: bool = False,
    max_staleness_s: float | None = None,
    schema_version: int = 1,
    added: dict[str, int] | None = None,
) -> TableInfo:
    """A TableInfo as the metadata store would return it (arrow schema encoded, bounds encoded)."""
    if schema is None:
        schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    elif not isinstance(schema, pa.Schema):
        schema = pa.schema(schema)
    added = added or {}
    columns = tuple(Column(f.name, str(f.type), f.name not in key, added.get(f.name, 1)) for f in schema)
    bounds = encode_bounds(pa.array(splits, schema.field(key[0]).type)) if splits is not None else None
    return TableInfo(
        id=id,
        source=source,
        schema=db_schema,
        name=name,
        columns=columns,
        key=tuple(key),
        arrow_schema_b64=encode_schema(schema),
        state=state,
        copy_seq=copy_seq,
        max_safe_seq=max_safe_seq,
        max_safe_time=max_safe_time,
        error=error,
        partition_bounds_b64=bounds,
        failover=failover,
        max_staleness_s=max_staleness_s,
        schema_version=schema_version,
    )


_delta_ids = iter(range(1, 1 << 30))


def make_delta(
    min_seq: int = 1,
    max_seq: int | None = None,
    *,
    part: int = 0,
    bytes: int = 1000,
    rows: int = 10,
    partial_rows: int = 0,
    unique_keys: bool = False,
    schema_version: int = 1,
    id: int | None = None,
    path: str | None = None,
    table_id: int = 1,
    deletes: int = 0,
) -> Delta:
    did = next(_delta_ids) if id is None else id
    return Delta(
        id=did,
        table_id=table_id,
        part=part,
        path=path or f"p{part:04d}/d{did}.parquet",
        min_seq=min_seq,
        max_seq=min_seq if max_seq is None else max_seq,
        rows=rows,
        bytes=bytes,
        partial_rows=partial_rows,
        deletes=deletes,
        unique_keys=unique_keys,
        schema_version=schema_version,
    )


# --- pushed subplans ------------------------------------------------------------------------


def lit(type_: str, value=None) -> Literal:
    return Literal(type_, value)


def lit_json(type_: str, value=None) -> dict:
    return {"type": type_, "value": value}


def cmp(op: str, col: str, type_: str, value) -> Predicate:
    return Predicate(op, col=col, value=Literal(type_, value))


def in_(col: str, *values: tuple[str, object]) -> Predicate:
    return Predicate("in", col=col, values=tuple(Literal(t, v) for t, v in values))


def and_(*args: Predicate) -> Predicate:
    return Predicate("and", args=tuple(args))


def or_(*args: Predicate) -> Predicate:
    return Predicate("or", args=tuple(args))


def not_(arg: Predicate) -> Predicate:
    return Predicate("not", args=(arg,))


def is_null(col: str) -> Predicate:
    return Predicate("is_null", col=col)


def is_not_null(col: str) -> Predicate:
    return Predicate("is_not_null", col=col)


# --- a model of SQL predicate evaluation ---------------------------------------------------------
# Three-valued logic (None is UNKNOWN), NaN equal to itself and above every other double (DuckDB,
# Postgres and Spark agree on that), LIKE-free string matches. Used as the oracle for rendered SQL.


def literal_value(lit: Literal):
    """The Python value a pushed literal stands for (as a row of the test tables holds it)."""
    t, v = lit.type, lit.value
    if t == "null" or v is None:
        return None
    if t == "double":
        return float(v)
    if t == "decimal":
        return decimal.Decimal(str(v))
    if t == "date":
        return dt.date.fromisoformat(str(v))
    if t == "timestamp":
        return EPOCH + dt.timedelta(microseconds=int(v))
    if t == "timestamp_ntz":
        return dt.datetime.fromisoformat(str(v))
    if t == "long":
        return int(v)
    if t == "boolean":
        return bool(v)
    return v


def _order_key(v):
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0)
    return (0, v)


def _compare(op: str, a, b):
    if a is None or b is None:
        return None
    ka, kb = _order_key(a), _order_key(b)
    return {"eq": ka == kb, "gt": ka > kb, "ge": ka >= kb, "lt": ka < kb, "le": ka <= kb}[op]


def evaluate(p: Predicate, row: dict):
    """True, False or None (UNKNOWN) for one row."""
    op = p.op
    if op in ("eq", "gt", "ge", "lt", "le"):
        return _compare(op, row[p.col], literal_value(p.value))
    if op == "eq_null_safe":
        a, b = row[p.col], literal_value(p.value)
        if a is None or b is None:
            return a is None and b is None
        return _compare("eq", a, b)
    if op == "in":
        a = row[p.col]
        if a is None:
            return None
        results = [_compare("eq", a, literal_value(v)) for v in p.values]
        if True in results:
            return True
        return None if None in results else False
    if op == "is_null":
        return row[p.col] is None
    if op == "is_not_null":
        return row[p.col] is not None
    if op in ("starts_with", "ends_with", "contains"):
        a, b = row[p.col], literal_value(p.value)
        if a is None or b is None:
            return None
        return {"starts_with": a.startswith, "ends_with": a.endswith, "contains": a.__contains__}[op](b)
    if op == "and":
        results = [evaluate(a, row) for a in p.args]
        if False in results:
            return False
        return None if None in results else True
    if op == "or":
        results = [evaluate(a, row) for a in p.args]
        if True in results:
            return True
        return None if None in results else False
    if op == "not":
        r = evaluate(p.args[0], row)
        return None if r is None else not r
    raise AssertionError(f"no model for {op}")


def matches(filters, row: dict) -> bool:
    """Whether a row passes a WHERE conjunction (only TRUE passes)."""
    return all(evaluate(f, row) is True for f in filters)


def sortable(rows) -> list[tuple]:
    """Rows as tuples sorted by repr (NaN and None sort without errors)."""
    return sorted((tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows), key=repr)


# --- golden files -------------------------------------------------------------------------------


def golden_sections(name: str) -> dict[str, str]:
    """A golden file of `-- <case>` headers, each followed by its text."""
    path = GOLDEN / name
    sections: dict[str, str] = {}
    current, lines = None, []
    for line in path.read_text().splitlines():
        if line.startswith("-- "):
            if current is not None:
                sections[current] = "\n".join(lines).strip()
            current, lines = line[3:].strip(), []
        else:
            lines.append(line)
    if current is not None:
        sections[current] = "\n".join(lines).strip()
    return sections


def check_golden(name: str, actual: dict[str, str]) -> None:
    """Compare case -> text with the golden file `name`; HTAP_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get(UPDATE_GOLDEN_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"-- {case}\n{text}\n\n" for case, text in actual.items()))
        return
    expected = golden_sections(name)
    assert sorted(actual) == sorted(expected), f"cases differ from {path} (run with {UPDATE_GOLDEN_ENV}=1 to rewrite)"
    for case, text in actual.items():
        assert text == expected[case], f"{name} [{case}]:\n  got:      {text}\n  expected: {expected[case]}"
