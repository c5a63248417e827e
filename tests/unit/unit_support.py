"""Shared helpers of the unit tier: TableInfo/Delta factories, pushed-plan builders (literals,
predicates, one-scan plans), golden files, a pure-Python model of pushed predicates (three-valued
logic), and the property-test settings.

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
from htap.rewrite.pushed import Expr, Literal, Node, PushedPlan, Scan

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


# --- pushed plans (htap.rewrite.pushed) ----------------------------------------------------------

# A pushed literal's type -> the Spark type the shim types such an expression with.
SPARK_TYPES = {
    "long": "bigint", "double": "double", "decimal": "decimal(38,10)", "string": "string", "date": "date",
    "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz", "boolean": "boolean", "null": "void",
}
# The short names tests use (the old V1 filter names) -> the IR's operations.
OPS = {
    "eq": "=", "ne": "<>", "eq_null_safe": "<=>", "gt": ">", "ge": ">=", "lt": "<", "le": "<=",
    "starts_with": "STARTS_WITH", "ends_with": "ENDS_WITH", "contains": "CONTAINS",
}
COMPARISONS = ("=", "<>", "<=>", "<", "<=", ">", ">=")
STRING_MATCHES = ("STARTS_WITH", "ENDS_WITH", "CONTAINS")


def lit(type_: str, value=None) -> Literal:
    return Literal(type_, value)


def lit_json(type_: str, value=None) -> dict:
    return {"type": type_, "value": value}


def spark_type(literal_type: str) -> str:
    return SPARK_TYPES[literal_type]


def col(name: str, type_: str = "") -> Expr:
    return Expr.column(name, type_)


def value(type_: str, v, spark: str | None = None) -> Expr:
    """A typed literal expression (its Spark type from the literal's unless given)."""
    return Expr.literal(Literal(type_, v), spark or spark_type(type_))


def op(name: str, *args: Expr, type_: str = "boolean") -> Expr:
    return Expr.call(OPS.get(name, name), type_, *args)


def cmp(op_: str, column: str, type_: str, v, spark: str | None = None) -> Expr:
    """`column op literal` as the shim sends it: both sides typed with the literal's Spark type
    (or `spark`). `op_`: an IR operation or one of the short names of OPS."""
    t = spark or spark_type(type_)
    return Expr.call(OPS.get(op_, op_), "boolean", Expr.column(column, t), Expr.literal(Literal(type_, v), t))


def in_(column: str, *values: tuple[str, object], spark: str | None = None) -> Expr:
    types = [t for t, _ in values if t != "null"]
    ct = spark or (spark_type(types[0]) if types else "void")
    return Expr.call("IN", "boolean", Expr.column(column, ct), *(Expr.literal(Literal(t, v), ct) for t, v in values))


def and_(*args: Expr) -> Expr:
    return Expr.call("AND", "boolean", *args)


def or_(*args: Expr) -> Expr:
    return Expr.call("OR", "boolean", *args)


def not_(arg: Expr) -> Expr:
    return Expr.call("NOT", "boolean", arg)


def is_null(column: str, type_: str = "") -> Expr:
    return Expr.call("IS_NULL", "boolean", Expr.column(column, type_))


def is_not_null(column: str, type_: str = "") -> Expr:
    return Expr.call("IS_NOT_NULL", "boolean", Expr.column(column, type_))


def agg(fn: str, *args: Expr, type_: str = "bigint", distinct: bool = False) -> Expr:
    """An aggregate call (count_star takes no argument)."""
    return Expr("agg", type_, fn, args=tuple(args), distinct=distinct)


def scan_node(k: int, *output: str) -> Node:
    return Node("scan", scan=k, output=tuple(output))


def one_scan(
    columns, filters=(), *, table: str = "public.t", aggregate=None, group_by=(), partial: bool = True,
    keys=(), limit: int | None = None, split: int | None = 0,
) -> PushedPlan:
    """A plan of one table's scan, as the shim pushes a single table's scan: its columns
    (output under their own names) and filter conjuncts; optionally an aggregate above it
    (`aggregate`: [(name, expr)], grouped by `group_by`; partial: per task), and a sort or top-N
    (`keys`, `limit`) at the root."""
    columns = tuple(columns)
    scan = Scan(table, columns, tuple(filters))
    root = Node("scan", scan=0, output=columns)
    if aggregate is not None:
        root = Node("aggregate", (root,), exprs=tuple(aggregate), group_by=tuple(group_by), partial=partial)
    if limit is not None:
        root = Node("limit", (root,), keys=tuple(keys), limit=limit)
    elif keys:
        root = Node("sort", (root,), keys=tuple(keys))
    return PushedPlan((scan,), root, split)


# --- a model of SQL predicate evaluation ---------------------------------------------------------
# Three-valued logic (None is UNKNOWN), NaN equal to itself and above every other double (DuckDB,
# Postgres and Spark agree on that), LIKE-free string matches. Used as the oracle for rendered SQL.
# It interprets pushed-plan expressions (htap.rewrite.pushed.Expr) over a row (a dict).


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


_COMPARE = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
}


def _compare(op: str, a, b):
    if a is None or b is None:
        return None
    return _COMPARE[op](_order_key(a), _order_key(b))


def _kleene_and(results):
    if False in results:
        return False
    return None if None in results else True


def _kleene_or(results):
    if True in results:
        return True
    return None if None in results else False


def evaluate(e: Expr, row: dict):
    """The value of an expression for one row; for a predicate True, False or None (UNKNOWN)."""
    if e.form == "col":
        return row[e.name]
    if e.form == "lit":
        return literal_value(e.value)
    if e.form != "op":
        raise AssertionError(f"no model for {e.form} expressions")
    op, args = e.name, e.args
    if op in _COMPARE:
        return _compare(op, evaluate(args[0], row), evaluate(args[1], row))
    if op == "<=>":
        a, b = evaluate(args[0], row), evaluate(args[1], row)
        if a is None or b is None:
            return a is None and b is None
        return _compare("=", a, b)
    if op == "IN":
        a = evaluate(args[0], row)
        if a is None:
            return None
        return _kleene_or([_compare("=", a, evaluate(v, row)) for v in args[1:]])
    if op == "IS_NULL":
        return evaluate(args[0], row) is None
    if op == "IS_NOT_NULL":
        return evaluate(args[0], row) is not None
    if op in STRING_MATCHES:
        a, b = evaluate(args[0], row), evaluate(args[1], row)
        if a is None or b is None:
            return None
        return {"STARTS_WITH": a.startswith, "ENDS_WITH": a.endswith, "CONTAINS": a.__contains__}[op](b)
    if op == "AND":
        return _kleene_and([evaluate(a, row) for a in args])
    if op == "OR":
        return _kleene_or([evaluate(a, row) for a in args])
    if op == "NOT":
        r = evaluate(args[0], row)
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
