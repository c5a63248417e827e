"""Aggregate view definitions (issue 31): the SQL a user gives `htap views create`, checked to be
one the replica can keep exact at every checkpoint, and what maintaining it takes.

A maintainable view is `SELECT <group columns and aggregates> FROM <table> [WHERE <condition>]
GROUP BY <columns>` over one HTAP table: aggregates SUM, COUNT, COUNT(*), AVG, MIN and MAX of a
column; a condition of comparisons of a column with a literal, IN lists, IS [NOT] NULL and
BETWEEN, joined by AND / OR / NOT. Anything else is refused with the reason — a DISTINCT
aggregate (a removed row cannot be taken out of it), a SUM or AVG of a floating point column
(signed sums of floats drift from a recomputation), an expression as a group or argument, a join,
HAVING, ORDER BY, LIMIT, a window, a subquery.

The definition keeps the states the maintenance needs beside what the user asked for: an AVG is a
sum and a count of its column (Spark's AVG computed from them when read); every SUM has a count
of its column (a sum over no value is NULL, not 0).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp

from htap.errors import HtapError


class ViewDefinitionError(HtapError):
    """A view's SQL the replica cannot maintain: the message says what and why."""


@dataclass(frozen=True)
class State:
    """A kept aggregate: `fn` (sum, count, min, max; count of None: COUNT(*)) of a column."""

    name: str
    fn: str
    arg: str | None


@dataclass(frozen=True)
class Output:
    """A column of the view as the user named it: a group column, or an aggregate read from
    states (`states`: the state names it is computed from; AVG: its sum and count)."""

    name: str
    kind: str  # "group", "sum", "count", "min", "max", "avg"
    states: tuple[str, ...]
    column: str | None  # the base column it groups by or aggregates (None: COUNT(*))


@dataclass(frozen=True)
class ViewDefinition:
    """What `htap views create` keeps of a view: its base table, group columns, the states kept
    per group (`_rows`, COUNT(*), always first), the columns users read, and the filter as
    DuckDB SQL over the base's columns (None: every row)."""

    table: str  # schema.table
    groups: tuple[str, ...]
    states: tuple[State, ...]
    outputs: tuple[Output, ...]
    filter_sql: str | None

    def to_json(self) -> str:
        """As the metadata store keeps it (`views.definition`)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ViewDefinition:
        d = json.loads(text)
        return cls(d["table"], tuple(d["groups"]), tuple(State(**x) for x in d["states"]),
                   tuple(Output(x["name"], x["kind"], tuple(x["states"]), x["column"]) for x in d["outputs"]),
                   d["filter_sql"])


ROWS_STATE = "_rows"
_AGGREGATES = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def parse_view(sql: str, tables: dict[str, pa.Schema]) -> ViewDefinition:
    """The definition of a view given as Spark SQL over `tables` (schema.table -> its columns),
    or a ViewDefinitionError saying why the replica cannot keep it."""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise ViewDefinitionError(f"the view's SQL does not parse: {str(e).splitlines()[0]}") from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise ViewDefinitionError("a view is one SELECT ... FROM <table> [WHERE ...] GROUP BY ... statement")
    select = statements[0]
    _refuse_clauses(select)
    table, schema = _table(select, tables)
    groups = _groups(select, schema)
    states: dict[tuple[str, str | None], State] = {("count", None): State(ROWS_STATE, "count", None)}
    outputs: list[Output] = []
    for item in select.expressions:
        outputs.append(_output(item, schema, set(groups), states))
    names = [o.name for o in outputs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ViewDefinitionError(f"the view names two columns {duplicate!r}: give each its own alias")
    where = select.args.get("where")
    filter_sql = None
    if where is not None:
        _check_condition(where.this, schema)
        filter_sql = where.this.sql(dialect="duckdb")
    return ViewDefinition(table, tuple(groups), tuple(states.values()), tuple(outputs), filter_sql)


def _refuse_clauses(select: exp.Select) -> None:
    why = {
        "joins": "a view over a join is not built yet: one table per view",
        "having": "HAVING filters the groups, which then appear and vanish as their aggregates change: filter when reading the view",
        "order": "ORDER BY belongs to the queries that read the view",
        "limit": "LIMIT belongs to the queries that read the view",
        "distinct": "SELECT DISTINCT is not an aggregate view: GROUP BY the columns instead",
        "with": "a WITH clause is not maintainable: one SELECT over one table",
        "qualify": "QUALIFY (a window) is not maintainable",
    }
    for arg, reason in why.items():
        if select.args.get(arg):
            raise ViewDefinitionError(reason)
    if any(select.find_all(exp.Window)):
        raise ViewDefinitionError("a window function is not maintainable from a checkpoint's changes")
    if any(isinstance(s, exp.Select) and s is not select for s in select.find_all(exp.Select)):
        raise ViewDefinitionError("a subquery is not maintainable: one SELECT over one table")
    if not select.args.get("group"):
        raise ViewDefinitionError("a view needs GROUP BY (a global aggregate: GROUP BY nothing is not built yet)")


def _table(select: exp.Select, tables: dict[str, pa.Schema]) -> tuple[str, pa.Schema]:
    source = select.args.get("from_") or select.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or not table.db:
        raise ViewDefinitionError("FROM must name one HTAP table as <schema>.<table>")
    name = f"{table.db}.{table.name}"
    if name not in tables:
        known = ", ".join(sorted(tables)) or "none"
        raise ViewDefinitionError(f"{name} is not an HTAP table of this source (its tables: {known}); "
                                  f"add it with `htap tables add {name}` first")
    return name, tables[name]


def _column(e: exp.Expression, schema: pa.Schema, what: str) -> str:
    if not isinstance(e, exp.Column):
        raise ViewDefinitionError(f"{what} must be a column of the table, not {e.sql(dialect='spark')}")
    if e.name not in schema.names:
        raise ViewDefinitionError(f"{what}: the table has no column {e.name!r} (its columns: {', '.join(schema.names)})")
    return e.name


def _groups(select: exp.Select, schema: pa.Schema) -> list[str]:
    groups = []
    for g in select.args["group"].expressions:
        name = _column(g, schema, "a GROUP BY item (expressions are not built yet)")
        if name not in groups:
            groups.append(name)
    return groups


def _output(item: exp.Expression, schema: pa.Schema, groups: set[str],
            states: dict[tuple[str, str | None], State]) -> Output:
    alias = item.alias if isinstance(item, exp.Alias) else None
    e = item.this if isinstance(item, exp.Alias) else item
    if isinstance(e, exp.Column):
        name = _column(e, schema, "a selected column")
        if name not in groups:
            raise ViewDefinitionError(f"{name} is selected but not in GROUP BY: select group columns and aggregates only")
        return Output(alias or name, "group", (), name)
    kind = _AGGREGATES.get(type(e))
    if kind is None:
        raise ViewDefinitionError(f"{e.sql(dialect='spark')} is neither a group column nor SUM, COUNT, AVG, MIN or MAX"
                                  " of a column")
    if isinstance(e.this, exp.Distinct):
        raise ViewDefinitionError(f"{e.sql(dialect='spark')}: a DISTINCT aggregate cannot take a removed row out")
    if isinstance(e.this, exp.Star):
        if kind != "count":
            raise ViewDefinitionError(f"{e.sql(dialect='spark')} is not an aggregate of a column")
        return Output(alias or "count", "count", (ROWS_STATE,), None)
    column = _column(e.this, schema, f"the argument of {kind.upper()}")
    t = schema.field(column).type
    if kind in ("sum", "avg") and pa.types.is_floating(t):
        raise ViewDefinitionError(f"{kind.upper()}({column}) of a floating point column: sums of floats kept by adding"
                                  " and subtracting changes drift from a recomputation; not maintainable exactly")
    if kind in ("sum", "avg") and not (pa.types.is_integer(t) or pa.types.is_decimal(t)):
        raise ViewDefinitionError(f"{kind.upper()}({column}): {t} is not a number")
    needed = {"sum": ["sum", "count"], "avg": ["sum", "count"], "count": ["count"], "min": ["min"], "max": ["max"]}[kind]
    for fn in needed:
        states.setdefault((fn, column), State(f"_{fn}_{column}", fn, column))
    used = ("sum", "count") if kind == "avg" else (kind,)
    return Output(alias or f"{kind}_{column}", kind, tuple(states[(fn, column)].name for fn in used), column)


def _check_condition(e: exp.Expression, schema: pa.Schema) -> None:
    """AND / OR / NOT over comparisons of a column with a literal, IN lists, IS [NOT] NULL and
    BETWEEN; strings compared by equality only (ranges of strings follow each engine's collation)."""
    if isinstance(e, exp.Paren):
        return _check_condition(e.this, schema)
    if isinstance(e, (exp.And, exp.Or)):
        _check_condition(e.left, schema)
        return _check_condition(e.right, schema)
    if isinstance(e, exp.Not):
        return _check_condition(e.this, schema)
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        _column(e.this, schema, "IS NULL's operand")
        return None
    if isinstance(e, exp.In) and not e.args.get("query"):
        column = _column(e.this, schema, "IN's operand")
        for v in e.expressions:
            _literal(v, column, schema)
        return None
    if isinstance(e, exp.Between):
        column = _column(e.this, schema, "BETWEEN's operand")
        _ordered(column, schema, "BETWEEN")
        _literal(e.args["low"], column, schema)
        _literal(e.args["high"], column, schema)
        return None
    if isinstance(e, _COMPARISONS):
        left, right = (e.left, e.right) if isinstance(e.left, exp.Column) else (e.right, e.left)
        column = _column(left, schema, f"{e.sql(dialect='spark')}: a comparison's column")
        if not isinstance(e, (exp.EQ, exp.NEQ)):
            _ordered(column, schema, e.key.upper())
        _literal(right, column, schema)
        return None
    raise ViewDefinitionError(f"the WHERE condition {e.sql(dialect='spark')} is not maintainable: compare columns with"
                              " literals (=, <>, <, <=, >, >=, IN, BETWEEN, IS NULL), joined by AND, OR, NOT")


def _ordered(column: str, schema: pa.Schema, what: str) -> None:
    t = schema.field(column).type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        raise ViewDefinitionError(f"{what} on the string column {column}: string order follows each engine's collation;"
                                  " compare strings with = , <> or IN")


def _literal(e: exp.Expression, column: str, schema: pa.Schema) -> None:
    if isinstance(e, exp.Neg):
        e = e.this
    if not isinstance(e, (exp.Literal, exp.Boolean, exp.Cast)) or (isinstance(e, exp.Cast) and not isinstance(e.this, exp.Literal)):
        raise ViewDefinitionError(f"{column} is compared with {e.sql(dialect='spark')}: only literals are maintainable")


def spark_view_sql(sql: str, catalog: str) -> str:
    """The view's SQL as Spark reads `<catalog>.views.<name>` (HtapCatalog.loadView): the user's
    aggregate with its table named in `catalog`, so Spark computes exactly what the SQL says —
    from the view's states when the ViewRewrite rule can, from the table (replica or source)
    otherwise."""
    select = sqlglot.parse_one(sql, read="spark")
    source = select.args.get("from_") or select.args.get("from")
    source.this.set("catalog", exp.to_identifier(catalog))
    return select.sql(dialect="spark")


def spark_filter(sql: str) -> str | None:
    """The view's WHERE condition as Spark SQL over its table's columns (None: every row), which
    ViewRewrite compares, once Spark has analyzed it, with a query's filter."""
    where = sqlglot.parse_one(sql, read="spark").args.get("where")
    return where.this.sql(dialect="spark") if where is not None else None
