"""The pushed subplan: what Spark hands a scan (columns, filters, partial aggregation).

The Java shim serializes Spark's pushed operators into the JSON form below; `PushedSubplan`
parses it once at the boundary. `render.py` turns it into SQL for DuckDB (replica) or the source.

JSON form (all keys optional):
  {"columns": ["a", "b"],                                  # output columns when not aggregating
   "filters": [<expr>, ...],                                # a conjunction
   "group_by": ["region"],
   "aggregates": [{"fn": "count_star"}, {"fn": "sum", "col": "amount"}, ...]}
  <expr> := {"op": "eq"|"eq_null_safe"|"gt"|"ge"|"lt"|"le", "col": c, "value": <lit>}
          | {"op": "in", "col": c, "values": [<lit>, ...]}
          | {"op": "is_null"|"is_not_null", "col": c}
          | {"op": "starts_with"|"ends_with"|"contains", "col": c, "value": <lit string>}
          | {"op": "and"|"or", "args": [<expr>, <expr>]} | {"op": "not", "arg": <expr>}
  <lit>  := {"type": "null"|"boolean"|"long"|"double"|"decimal"|"string"|"date"|"timestamp"
                     |"timestamp_ntz", "value": ...}   # timestamp: epoch microseconds (UTC)

Typed expressions (Spark's V2 expressions, catalog/java/io/sparkhtap/V2Json.java), each with its
Spark result type (`int`, `decimal(12,2)`, `string`, ...), which renderers cast to:
  "where": [<vexpr>, ...]                                   # more conjuncts, beside "filters"
  "group_by": [..., <vexpr>]                                # a column name or an expression
  "aggregates": [{"fn": "sum"|"count"|"min"|"max", "arg": <vexpr>}, ...]
  <vexpr> := {"col": c, "type": t} | {"lit": <lit>, "type": t}
           | {"op": OP, "type": t, "args": [<vexpr>, ...]}  (+ "field" for "extract")
  OP: = <> <=> < <= > >= AND OR NOT IS_NULL IS_NOT_NULL IN STARTS_WITH ENDS_WITH CONTAINS
      + - * NEG CASE_WHEN COALESCE SUBSTRING extract cast
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from htap.errors import HtapError

COMPARISONS = ("eq", "eq_null_safe", "gt", "ge", "lt", "le")
STRING_MATCHES = ("starts_with", "ends_with", "contains")
LITERAL_TYPES = ("null", "boolean", "long", "double", "decimal", "string", "date", "timestamp", "timestamp_ntz")
AGGREGATE_FUNCTIONS = ("count_star", "count", "sum", "min", "max")
EXPRESSION_OPS = (
    "=", "<>", "<=>", "<", "<=", ">", ">=", "AND", "OR", "NOT", "IS_NULL", "IS_NOT_NULL", "IN",
    "STARTS_WITH", "ENDS_WITH", "CONTAINS", "+", "-", "*", "NEG", "CASE_WHEN", "COALESCE", "SUBSTRING",
    "extract", "cast",
)


class SubplanError(HtapError):
    """A pushed subplan the reader does not understand (a shim/reader version mismatch)."""


@dataclass(frozen=True)
class Literal:
    type: str
    value: object


@dataclass(frozen=True)
class Predicate:
    op: str
    col: str | None = None
    value: Literal | None = None
    values: tuple[Literal, ...] = ()
    args: tuple["Predicate", ...] = ()

    def columns(self) -> set[str]:
        out = {self.col} if self.col else set()
        for a in self.args:
            out |= a.columns()
        return out


@dataclass(frozen=True)
class Expr:
    """A typed expression: a column, a literal or an operation; `type` is Spark's result type."""

    form: str  # "col" | "lit" | "op"
    type: str = ""
    name: str | None = None  # the column (col) or the operation (op)
    value: Literal | None = None  # lit
    args: tuple["Expr", ...] = ()
    field: str | None = None  # extract: YEAR, MONTH, DAY, QUARTER

    @classmethod
    def column(cls, name: str, type: str = "") -> "Expr":
        return cls("col", type, name)

    def columns(self) -> set[str]:
        out = {self.name} if self.form == "col" and self.name else set()
        for a in self.args:
            out |= a.columns()
        return out


@dataclass(frozen=True)
class Aggregate:
    fn: str
    col: str | None = None
    arg: Expr | None = None  # an expression instead of a column

    @property
    def input(self) -> Expr | None:
        return self.arg if self.arg is not None else (Expr.column(self.col) if self.col else None)


@dataclass(frozen=True)
class PushedSubplan:
    columns: tuple[str, ...] | None = None  # None: every column
    filters: tuple[Predicate, ...] = ()
    group_by: tuple[Expr, ...] = ()  # column names given here become column expressions
    aggregates: tuple[Aggregate, ...] = ()
    raw: dict = field(default_factory=dict, compare=False)
    where: tuple[Expr, ...] = ()  # typed conjuncts beside `filters` (those prune partitions)

    def __post_init__(self):
        groups = tuple(Expr.column(g) if isinstance(g, str) else g for g in self.group_by)
        object.__setattr__(self, "group_by", groups)

    @property
    def aggregating(self) -> bool:
        return bool(self.aggregates) or bool(self.group_by)

    @property
    def needs_no_column(self) -> bool:
        """Spark wants only the rows (`SELECT 1 FROM t`, `count(*)` it computes itself)."""
        return not self.aggregating and self.columns == ()

    def carrying_rows(self, column: str) -> "PushedSubplan":
        """This subplan, with `column` selected when it needs no column: no SQL dialect we render
        can select nothing (`SELECT FROM t`), so the reader selects one column and drops it."""
        if not self.needs_no_column:
            return self
        return PushedSubplan(columns=(column,), filters=self.filters, raw=self.raw, where=self.where)

    def referenced_columns(self) -> set[str]:
        """Every table column the subplan reads (to prune what is scanned)."""
        cols: set[str] = set(self.columns or ())
        for f in self.filters:
            cols |= f.columns()
        for e in self.where + self.group_by:
            cols |= e.columns()
        for a in self.aggregates:
            if a.input is not None:
                cols |= a.input.columns()
        return cols

    def to_dict(self) -> dict:
        return self.raw

    @classmethod
    def from_json(cls, text: str | None) -> "PushedSubplan":
        if not text:
            return cls()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise SubplanError(f"pushed subplan is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> "PushedSubplan":
        unknown = set(raw) - {"columns", "filters", "group_by", "aggregates", "where"}
        if unknown:
            raise SubplanError(f"pushed subplan has unknown keys {sorted(unknown)}")
        columns = raw.get("columns")
        return cls(
            columns=None if columns is None else tuple(columns),
            filters=tuple(_predicate(f) for f in raw.get("filters", [])),
            group_by=tuple(g if isinstance(g, str) else _expr(g) for g in raw.get("group_by", [])),
            aggregates=tuple(_aggregate(a) for a in raw.get("aggregates", [])),
            raw=raw,
            where=tuple(_expr(e) for e in raw.get("where", [])),
        )


def _literal(raw: dict) -> Literal:
    if raw.get("type") not in LITERAL_TYPES:
        raise SubplanError(f"unknown literal type in pushed filter: {raw!r}")
    return Literal(raw["type"], raw.get("value"))


def _predicate(raw: dict) -> Predicate:
    op = raw.get("op")
    if op in COMPARISONS or op in STRING_MATCHES:
        return Predicate(op, col=raw["col"], value=_literal(raw["value"]))
    if op == "in":
        return Predicate(op, col=raw["col"], values=tuple(_literal(v) for v in raw["values"]))
    if op in ("is_null", "is_not_null"):
        return Predicate(op, col=raw["col"])
    if op in ("and", "or"):
        return Predicate(op, args=tuple(_predicate(a) for a in raw["args"]))
    if op == "not":
        return Predicate(op, args=(_predicate(raw["arg"]),))
    raise SubplanError(f"unknown pushed filter {raw!r}")


def _aggregate(raw: dict) -> Aggregate:
    if raw.get("fn") not in AGGREGATE_FUNCTIONS:
        raise SubplanError(f"unknown pushed aggregate {raw!r}")
    return Aggregate(raw["fn"], raw.get("col"), _expr(raw["arg"]) if "arg" in raw else None)


def _expr(raw: dict) -> Expr:
    if not isinstance(raw, dict):
        raise SubplanError(f"pushed expression is not an object: {raw!r}")
    t = raw.get("type", "")
    if "col" in raw:
        return Expr("col", t, raw["col"])
    if "lit" in raw:
        return Expr("lit", t, value=_literal(raw["lit"]))
    if raw.get("op") in EXPRESSION_OPS:
        return Expr("op", t, raw["op"], args=tuple(_expr(a) for a in raw.get("args", [])), field=raw.get("field"))
    raise SubplanError(f"unknown pushed expression {raw!r}")
