"""Aggregate view definitions (issue 31): the SQL a user gives `htap views create`, checked to be
one the replica can keep exact at every checkpoint, and what maintaining it takes.

A maintainable view is `SELECT <group columns and aggregates> FROM <table> [JOIN <dimension> ON
<its whole primary key> ...] [WHERE <condition>] GROUP BY <columns>` over HTAP tables of one
source: aggregates SUM, COUNT, COUNT(*), AVG, MIN and MAX of a column; a condition of comparisons
of a column with a literal, IN lists, IS [NOT] NULL and BETWEEN, joined by AND / OR / NOT.
Anything else is refused with the reason — a DISTINCT aggregate (a removed row cannot be taken
out of it), a SUM or AVG of a floating point column (signed sums of floats drift from a
recomputation), an expression as a group or argument, an outer join or a join on anything but a
dimension's primary key, HAVING, ORDER BY, LIMIT, a window, a subquery.

A join view aggregates its joined rows: one per row of its table (a dimension joined by its whole
key matches at most one row), keyed by the table's key. Its columns are named as the table's own
and, for a dimension's, `<alias>__<column>` (`Dimension`); the maintenance keeps it from the
changes of every table it joins (htap.replica.view_bases).

The definition keeps the states the maintenance needs beside what the user asked for: an AVG is a
sum and a count of its column (Spark's AVG computed from them when read); every SUM has a count
of its column (a sum over no value is NULL, not 0).
"""

from __future__ import annotations

import dataclasses
import datetime
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
class Dimension:
    """A table inner-joined to the view's table by its whole primary key: `on` pairs a column of
    the view's table with each of its key columns; `columns`: its columns the view uses, which
    its groups, aggregates and filter name `<alias>__<column>`."""

    table: str  # schema.table
    alias: str
    on: tuple[tuple[str, str], ...]  # (column of the view's table, key column of this table)
    columns: tuple[str, ...]

    def name(self, column: str) -> str:
        """The joined rows' name of one of its columns."""
        return f"{self.alias}{DIMENSION_SEPARATOR}{column}"


DIMENSION_SEPARATOR = "__"


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
    dimensions: tuple[Dimension, ...] = ()  # joined by their keys (a join view)

    def to_json(self) -> str:
        """As the metadata store keeps it (`views.definition`)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ViewDefinition:
        d = json.loads(text)
        return cls(d["table"], tuple(d["groups"]), tuple(State(**x) for x in d["states"]),
                   tuple(Output(x["name"], x["kind"], tuple(x["states"]), x["column"]) for x in d["outputs"]),
                   d["filter_sql"],
                   tuple(Dimension(x["table"], x["alias"], tuple(tuple(p) for p in x["on"]), tuple(x["columns"]))
                         for x in d.get("dimensions", ())))


ROWS_STATE = "_rows"
_AGGREGATES = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def parse_view(sql: str, tables: dict[str, pa.Schema], keys: dict[str, tuple[str, ...]] | None = None) -> ViewDefinition:
    """The definition of a view given as Spark SQL over `tables` (schema.table -> its columns;
    `keys`: their primary keys, which a join must use), or a ViewDefinitionError saying why the
    replica cannot keep it."""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise ViewDefinitionError(f"the view's SQL does not parse: {str(e).splitlines()[0]}") from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise ViewDefinitionError("a view is one SELECT ... FROM <table> [WHERE ...] GROUP BY ... statement")
    select = statements[0]
    _refuse_clauses(select)
    scope = _Scope()
    source = select.args.get("from_") or select.args.get("from")
    table = scope.name_of(scope.add(source.this if source is not None else None, tables))
    joins = [(join, scope.add(join.this, tables)) for join in select.args.get("joins") or ()]
    on = [_join_keys(join, alias, scope, (keys or {}).get(scope.name_of(alias), ())) for join, alias in joins]
    groups = _groups(select, scope)
    states: dict[tuple[str, str | None], State] = {("count", None): State(ROWS_STATE, "count", None)}
    outputs: list[Output] = []
    for item in select.expressions:
        outputs.append(_output(item, scope, set(groups), states))
    names = [o.name for o in outputs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ViewDefinitionError(f"the view names two columns {duplicate!r}: give each its own alias")
    where = select.args.get("where")
    filter_sql = None
    if where is not None:
        _check_condition(where.this, scope)
        filter_sql = scope.joined(where.this).sql(dialect="duckdb")
    dimensions = tuple(Dimension(scope.name_of(alias), alias, pairs, tuple(scope.used(alias)))
                       for (_join, alias), pairs in zip(joins, on))
    return ViewDefinition(table, tuple(groups), tuple(states.values()), tuple(outputs), filter_sql, dimensions)


def _refuse_clauses(select: exp.Select) -> None:
    why = {
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


class _Scope:
    """The tables a view's SQL names — its table first, then its dimensions — by alias, and the
    joined rows' name (`Dimension.name`; the table's own columns keep theirs) and type of each
    column it resolves."""

    def __init__(self):
        self._tables: dict[str, tuple[str, pa.Schema]] = {}  # alias (lower case) -> (schema.table, columns)
        self._aliases: list[str] = []
        self._used: dict[str, list[str]] = {}
        self._fields: dict[str, pa.Field] = {}

    def add(self, table: exp.Expression | None, tables: dict[str, pa.Schema]) -> str:
        """Add a FROM or JOIN table; its alias (the view's table: its schema.table)."""
        if not isinstance(table, exp.Table) or not table.db:
            raise ViewDefinitionError("FROM and JOIN must name HTAP tables as <schema>.<table>")
        name = f"{table.db}.{table.name}"
        if name not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise ViewDefinitionError(f"{name} is not an HTAP table of this source (its tables: {known}); "
                                      f"add it with `htap tables add {name}` first")
        if any(n == name for n, _ in self._tables.values()):
            raise ViewDefinitionError(f"{name} is joined twice: a view joins each table once")
        alias = (table.alias or table.name).lower()
        if alias in self._tables:
            raise ViewDefinitionError(f"two tables are named {alias!r} in the view: give each its own alias")
        first = not self._tables
        self._tables[alias] = (name, tables[name])
        self._aliases.append(alias)
        self._used[alias] = []
        for f in tables[name]:
            joined = f.name if first else f"{alias}{DIMENSION_SEPARATOR}{f.name}"
            if joined in self._fields:
                raise ViewDefinitionError(f"the column {joined!r} of the joined rows would be two columns: alias "
                                          f"{name} otherwise")
            self._fields[joined] = pa.field(joined, f.type)
        return alias

    def name_of(self, alias: str) -> str:
        return self._tables[alias][0]

    def used(self, alias: str) -> list[str]:
        return self._used[alias]

    def resolve(self, e: exp.Expression, what: str) -> str:
        """The joined rows' name of a column reference (qualified by alias or table, or unique)."""
        if not isinstance(e, exp.Column):
            raise ViewDefinitionError(f"{what} must be a column of the table, not {e.sql(dialect='spark')}")
        if e.table:
            alias = e.table.lower()
            if alias not in self._tables:
                raise ViewDefinitionError(f"{what}: {e.sql(dialect='spark')} names no table of the view "
                                          f"(its tables: {', '.join(self._aliases)})")
            candidates = [alias]
        else:
            candidates = [a for a in self._aliases if e.name in self._tables[a][1].names]
        if len(candidates) > 1:
            raise ViewDefinitionError(f"{what}: {e.name} is a column of {' and '.join(candidates)}: qualify it")
        if not candidates or e.name not in self._tables[candidates[0]][1].names:
            table = self._tables[candidates[0] if candidates else self._aliases[0]]
            raise ViewDefinitionError(f"{what}: the table has no column {e.name!r} (the columns of {table[0]}: "
                                      f"{', '.join(table[1].names)})")
        alias = candidates[0]
        if e.name not in self._used[alias]:
            self._used[alias].append(e.name)
        return e.name if alias == self._aliases[0] else f"{alias}{DIMENSION_SEPARATOR}{e.name}"

    def field(self, joined: str) -> pa.Field:
        return self._fields[joined]

    def joined(self, condition: exp.Expression) -> exp.Expression:
        """`condition` with every column named as in the joined rows (unqualified, quoted)."""
        return condition.transform(lambda n: exp.column(self.resolve(n, "a column"), quoted=True)
                                   if isinstance(n, exp.Column) else n)


def _join_keys(join: exp.Join, alias: str, scope: _Scope, key: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The (table column, dimension key column) pairs of an inner join on the dimension's whole
    primary key, or why a join is not maintainable."""
    name = scope.name_of(alias)
    if join.args.get("side") or (join.args.get("kind") or "INNER").upper() != "INNER" or join.args.get("using"):
        raise ViewDefinitionError(f"the join with {name}: only an inner JOIN ... ON its primary key is maintainable")
    on = join.args.get("on")
    conjuncts = list(on.flatten()) if isinstance(on, exp.And) else [on] if on is not None else []
    pairs = []
    for c in conjuncts:
        c = c.unnest() if isinstance(c, exp.Paren) else c
        if not (isinstance(c, exp.EQ) and isinstance(c.left, exp.Column) and isinstance(c.right, exp.Column)):
            raise ViewDefinitionError(f"the join with {name}: ON must equate columns of the view's table with "
                                      f"{name}'s primary key ({', '.join(key) or 'none'}), not "
                                      f"{c.sql(dialect='spark') if c is not None else 'nothing'}")
        left, right = scope.resolve(c.left, "a join column"), scope.resolve(c.right, "a join column")
        prefix = f"{alias}{DIMENSION_SEPARATOR}"
        if right.startswith(prefix) and DIMENSION_SEPARATOR not in left:
            fact, dim = left, right
        elif left.startswith(prefix) and DIMENSION_SEPARATOR not in right:
            fact, dim = right, left
        else:
            raise ViewDefinitionError(f"the join with {name}: {c.sql(dialect='spark')} must equate a column of the "
                                      f"view's table with one of {name} (dimensions join the view's table only)")
        ft, dt = scope.field(fact).type, scope.field(dim).type
        if ft != dt and not (pa.types.is_integer(ft) and pa.types.is_integer(dt)):
            raise ViewDefinitionError(f"the join with {name}: {fact} ({ft}) and {dim} ({dt}) differ in type")
        pairs.append((fact, dim[len(prefix):]))
    if not key or sorted(d for _, d in pairs) != sorted(key):
        raise ViewDefinitionError(f"the join with {name}: ON must cover its primary key ({', '.join(key) or 'none'})"
                                  f" exactly, so that each row of the view's table joins at most one of its rows")
    return tuple(pairs)


def _groups(select: exp.Select, scope: _Scope) -> list[str]:
    groups = []
    for g in select.args["group"].expressions:
        name = scope.resolve(g, "a GROUP BY item (expressions are not built yet)")
        if name not in groups:
            groups.append(name)
    return groups


def _output(item: exp.Expression, scope: _Scope, groups: set[str],
            states: dict[tuple[str, str | None], State]) -> Output:
    alias = item.alias if isinstance(item, exp.Alias) else None
    e = item.this if isinstance(item, exp.Alias) else item
    if isinstance(e, exp.Column):
        name = scope.resolve(e, "a selected column")
        if name not in groups:
            raise ViewDefinitionError(f"{name} is selected but not in GROUP BY: select group columns and aggregates only")
        return Output(alias or e.name, "group", (), name)
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
    column = scope.resolve(e.this, f"the argument of {kind.upper()}")
    t = scope.field(column).type
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


def _check_condition(e: exp.Expression, scope: _Scope) -> None:
    """AND / OR / NOT over comparisons of a column with a literal, IN lists, IS [NOT] NULL and
    BETWEEN; strings compared by equality only (ranges of strings follow each engine's collation)."""
    if isinstance(e, exp.Paren):
        return _check_condition(e.this, scope)
    if isinstance(e, (exp.And, exp.Or)):
        _check_condition(e.left, scope)
        return _check_condition(e.right, scope)
    if isinstance(e, exp.Not):
        return _check_condition(e.this, scope)
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        scope.resolve(e.this, "IS NULL's operand")
        return None
    if isinstance(e, exp.In) and not e.args.get("query"):
        column = scope.resolve(e.this, "IN's operand")
        for v in e.expressions:
            _literal(v, column)
        return None
    if isinstance(e, exp.Between):
        column = scope.resolve(e.this, "BETWEEN's operand")
        _ordered(column, scope, "BETWEEN")
        _literal(e.args["low"], column)
        _literal(e.args["high"], column)
        return None
    if isinstance(e, _COMPARISONS):
        left, right = (e.left, e.right) if isinstance(e.left, exp.Column) else (e.right, e.left)
        column = scope.resolve(left, f"{e.sql(dialect='spark')}: a comparison's column")
        if not isinstance(e, (exp.EQ, exp.NEQ)):
            _ordered(column, scope, e.key.upper())
        _literal(right, column)
        return None
    raise ViewDefinitionError(f"the WHERE condition {e.sql(dialect='spark')} is not maintainable: compare columns with"
                              " literals (=, <>, <, <=, >, >=, IN, BETWEEN, IS NULL), joined by AND, OR, NOT")


def _ordered(column: str, scope: _Scope, what: str) -> None:
    t = scope.field(column).type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        raise ViewDefinitionError(f"{what} on the string column {column}: string order follows each engine's collation;"
                                  " compare strings with = , <> or IN")


def _literal(e: exp.Expression, column: str) -> None:
    if isinstance(e, exp.Neg):
        e = e.this
    if not isinstance(e, (exp.Literal, exp.Boolean, exp.Cast)) or (isinstance(e, exp.Cast) and not isinstance(e.this, exp.Literal)):
        raise ViewDefinitionError(f"{column} is compared with {e.sql(dialect='spark')}: only literals are maintainable")


def spark_view_sql(sql: str, catalog: str, version: str | None = None, time: float | None = None) -> str:
    """The view's SQL as Spark reads `<catalog>.views.<name>` (HtapCatalog.loadView): the user's
    aggregate with its tables named in `catalog`, so Spark computes exactly what the SQL says —
    from the view's states when the ViewRewrite rule can, from the table (replica or source)
    otherwise. With `version` (a seq as typed) or `time` (Unix seconds), every table read
    `FOR VERSION|TIMESTAMP AS OF` it: what a user runs for a view's past (Spark has no time
    travel on views)."""
    select = sqlglot.parse_one(sql, read="spark")
    source = select.args.get("from_") or select.args.get("from")
    for table in [source.this, *(join.this for join in select.args.get("joins") or ())]:
        table.set("catalog", exp.to_identifier(catalog))
        if version is not None:
            table.set("version", exp.Version(this="VERSION", kind="AS OF", expression=exp.Literal.string(version)))
        elif time is not None:
            stamp = datetime.datetime.fromtimestamp(time, tz=datetime.timezone.utc).isoformat(timespec="microseconds")
            table.set("version", exp.Version(this="TIMESTAMP", kind="AS OF",
                                             expression=exp.Literal.string(stamp.replace("+00:00", "Z"))))
    return select.sql(dialect="spark")


def spark_filter(sql: str) -> str | None:
    """The view's WHERE condition as Spark SQL over its table's columns (None: every row), which
    ViewRewrite compares, once Spark has analyzed it, with a query's filter. A join view's is its
    join conditions and its WHERE, over its tables' aliases (`spark_aliases`)."""
    select = sqlglot.parse_one(sql, read="spark")
    where = select.args.get("where")
    conditions = [join.args["on"] for join in select.args.get("joins") or ()] + ([where.this] if where is not None else [])
    return " AND ".join(f"({c.sql(dialect='spark')})" for c in conditions) if conditions else None


def spark_aliases(sql: str) -> dict[str, str]:
    """Each table of a view's SQL (schema.table) by the alias its columns are named with."""
    select = sqlglot.parse_one(sql, read="spark")
    source = select.args.get("from_") or select.args.get("from")
    tables = [source.this, *(join.this for join in select.args.get("joins") or ())]
    return {f"{t.db}.{t.name}": t.alias or t.name for t in tables}
