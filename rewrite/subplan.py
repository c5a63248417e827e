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
  {"fn": "avg", "arg": <vexpr of type decimal(p,s)>, "type": "decimal(p+4,s+4)"}  # only complete:
      Spark's own AVG value (sum / count rounded HALF_UP to the type's scale, NULL for no rows),
      taken by a single table's scan in one task for 11 < p <= 28 (HtapScanBuilder.exactAverage)
  <vexpr> := {"col": c, "type": t} | {"lit": <lit>, "type": t}
           | {"op": OP, "type": t, "args": [<vexpr>, ...]}  (+ "field" for "extract")
  OP: = <> <=> < <= > >= AND OR NOT IS_NULL IS_NOT_NULL IN STARTS_WITH ENDS_WITH CONTAINS
      + - * NEG CASE_WHEN COALESCE SUBSTRING extract cast LIKE (a pushed tree's general LIKE:
      args [<vexpr>, a string literal pattern]; '\\' escapes '%', '_' and itself, as in Spark)

Top-N and limit (Spark's SupportsPushDownTopN / Limit; per task unless the scan is one task):
  "order": [{"expr": <vexpr>} | {"output": k}, "asc": bool, "nulls_first": bool}, ...]
  "limit": n                                                # k: position among the outputs
  "complete": true                                          # the aggregate is final (one task)
  "one_task": true                  # a single table's scan read in one task: every partition in one
                                    # query, its aggregate, order and limit final over all of them

Joins pushed into one scan (Spark's SupportsPushDownJoin; catalog/java/.../JoinedTables.java):
  "join": {"tables": [{"table": "schema.name", "pushed": {"filters", "where", "columns"}}, ...],
           "steps": [{"type": "inner"|"left"|"right", "on": <vexpr>}, ...],  # steps[k-1] joins
           "split": i}                                      # tables[k] onto tables[0..k-1]
  "select": [<vexpr>, ...]                                  # the outputs when not aggregating
Every column above the tables (on, select, group_by, aggregates, order) names its table:
{"col": c, "table": i, "type": t}; `split` (optional) is the table whose partitions are the tasks.

A whole subtree of the query pushed into one scan (catalog/java/.../SubtreeJson.java, issue 12):
  {"tree": {"leaves": [{"table": "schema.name", "pushed": <a scan's own subplan>}, ...],
            "root": <node>}}
  <node> := {"node": "scan", "leaf": k, "output": [name, ...]}      # leaf k's outputs, renamed
          | {"node": "project", "child": <node>, "exprs": [{"name": n, "expr": <texpr>}, ...]}
          | {"node": "filter", "child": <node>, "cond": <texpr>}
          | {"node": "join", "type": "inner"|"left"|"right"|"full"|"cross"|"semi"|"anti",
             "left": <node>, "right": <node>, "on": <texpr>}    # "on" optional; semi/anti: EXISTS
          | {"node": "aggregate", "child": <node>, "group_by": [<texpr>, ...],
             "exprs": [{"name": n, "expr": <texpr>}, ...]}
          | {"node": "sort", "child": <node>, "keys": [<key>, ...]}  # only at the root
          | {"node": "limit", "child": <node>, "limit": n, "keys": [<key>, ...]}  # keys: top-N
  <texpr> := <vexpr> over the columns of the child nodes' outputs (every name unique in the tree)
           | {"agg": "sum"|"count"|"count_star"|"min"|"max", "distinct": bool, "args": [<texpr>], "type": t}
           | {"subquery": <node>, "type": t}                    # an uncorrelated scalar subquery
           | {"op": "/", "type": "decimal(p,s)", "args": [<texpr>, <texpr>]}  # decimal division:
             the exact quotient rounded HALF_UP (away from zero) to scale s, NULL for a zero divisor
             (Spark's AVG of decimals, catalog/java/.../SubtreeJson.java `average`)
  <key>   := {"expr": <texpr>, "asc": bool, "nulls_first": bool}
The whole tree is one task: one query at the query's one snapshot (replica or source, never both).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from htap.errors import HtapError

COMPARISONS = ("eq", "eq_null_safe", "gt", "ge", "lt", "le")
STRING_MATCHES = ("starts_with", "ends_with", "contains")
LITERAL_TYPES = ("null", "boolean", "long", "double", "decimal", "string", "date", "timestamp", "timestamp_ntz")
AGGREGATE_FUNCTIONS = ("count_star", "count", "count_distinct", "sum", "min", "max", "avg")
JOIN_TYPES = ("inner", "left", "right")
TREE_NODES = ("scan", "project", "filter", "join", "aggregate", "sort", "limit")
TREE_JOIN_TYPES = ("inner", "left", "right", "full", "cross", "semi", "anti")
TREE_AGGREGATES = ("sum", "count", "count_star", "min", "max")
EXPRESSION_OPS = (
    "=", "<>", "<=>", "<", "<=", ">", ">=", "AND", "OR", "NOT", "IS_NULL", "IS_NOT_NULL", "IN",
    "STARTS_WITH", "ENDS_WITH", "CONTAINS", "+", "-", "*", "NEG", "CASE_WHEN", "COALESCE", "SUBSTRING",
    "extract", "cast", "LIKE",
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
    table: int | None = None  # col in a joined scan: the table's position in the join
    plan: "TreeNode | None" = None  # subquery (form "subquery")
    distinct: bool = False  # agg (form "agg": name is the function)

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
    type: str = ""  # avg: Spark's result type, decimal(p + 4, s + 4) of its decimal(p, s) input

    @property
    def input(self) -> Expr | None:
        return self.arg if self.arg is not None else (Expr.column(self.col) if self.col else None)


@dataclass(frozen=True)
class SortKey:
    expr: Expr | None  # an expression over the scan's columns, or
    output: int | None  # the position of an output (after a pushed aggregate)
    asc: bool = True
    nulls_first: bool = True


@dataclass(frozen=True)
class JoinStep:
    type: str  # inner | left | right
    on: Expr


@dataclass(frozen=True)
class JoinedTable:
    name: str  # schema.table
    subplan: "PushedSubplan"  # its own columns, filters and where


@dataclass(frozen=True)
class PushedJoin:
    tables: tuple[JoinedTable, ...]
    steps: tuple[JoinStep, ...]  # steps[k - 1] joins tables[k] onto tables[0..k-1]
    split: int | None = None  # the table whose partitions become the tasks; None: one task

    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]


@dataclass(frozen=True)
class PushedSubplan:
    columns: tuple[str, ...] | None = None  # None: every column
    filters: tuple[Predicate, ...] = ()
    group_by: tuple[Expr, ...] = ()  # column names given here become column expressions
    aggregates: tuple[Aggregate, ...] = ()
    raw: dict = field(default_factory=dict, compare=False)
    where: tuple[Expr, ...] = ()  # typed conjuncts beside `filters` (those prune partitions)
    order: tuple[SortKey, ...] = ()
    limit: int | None = None
    complete: bool = False  # the aggregate is final: no partial sums split into rows
    join: PushedJoin | None = None
    select: tuple[Expr, ...] = ()  # a joined scan's outputs when not aggregating
    tree: "PushedTree | None" = None  # a whole subtree of the query (one task)
    one_task: bool = False  # a single table's scan in one task (catalog/java/.../JoinedTables.splitTable)

    def __post_init__(self):
        groups = tuple(Expr.column(g) if isinstance(g, str) else g for g in self.group_by)
        object.__setattr__(self, "group_by", groups)

    @property
    def aggregating(self) -> bool:
        return bool(self.aggregates) or bool(self.group_by)

    @property
    def needs_no_column(self) -> bool:
        """Spark wants only the rows (`SELECT 1 FROM t`, `count(*)` it computes itself)."""
        return not self.aggregating and self.columns == () and self.join is None and self.tree is None

    def carrying_rows(self, column: str) -> "PushedSubplan":
        """This subplan, with `column` selected when it needs no column: no SQL dialect we render
        can select nothing (`SELECT FROM t`), so the reader selects one column and drops it."""
        if not self.needs_no_column:
            return self
        return dataclasses.replace(self, columns=(column,))

    def referenced_columns(self) -> set[str]:
        """Every table column the subplan reads (to prune what is scanned)."""
        cols: set[str] = set(self.columns or ())
        for f in self.filters:
            cols |= f.columns()
        for e in self.where + self.group_by + tuple(k.expr for k in self.order if k.expr is not None):
            cols |= e.columns()
        for a in self.aggregates:
            if a.input is not None:
                cols |= a.input.columns()
        return cols

    def columns_to_check(self, all_columns: list[str]) -> list[str]:
        """The table columns a role must be allowed to SELECT for this subplan: every column for
        `SELECT *` (`columns` None, not aggregating), none for `count(*)` or `SELECT 1` (the
        source then asks for a grant on any one column), else the referenced ones."""
        if self.columns is None and not self.aggregating:
            return sorted(all_columns)
        return sorted(self.referenced_columns())

    def without_top(self) -> "PushedSubplan":
        """The rows this subplan reads before grouping, ordering and limiting (a table's part)."""
        return dataclasses.replace(self, group_by=(), aggregates=(), order=(), limit=None, complete=False,
                                   one_task=False)

    def to_dict(self) -> dict:
        return self.raw

    def table_part(self) -> "PushedSubplan":
        """What a scan reads of its table before its own grouping, ordering and limit: its
        filters and the columns it needs (every referenced one when it aggregates)."""
        part = self.without_top()
        if self.aggregating or self.order:  # sort keys may name columns that are not outputs
            part = dataclasses.replace(part, columns=tuple(sorted(self.referenced_columns())))
        return part

    def part_and_top(self, carrier: str) -> tuple["PushedSubplan", "PushedSubplan"]:
        """A single table's scan split where its table's rows are read: (`table_part()`, what
        runs above those rows — its outputs, grouping, order and limit, the filters applied
        below), each selecting `carrier` (a key column) when it needs no column (`carrying_rows`)."""
        top = dataclasses.replace(self, filters=(), where=())
        return self.table_part().carrying_rows(carrier), top.carrying_rows(carrier)

    def table_reads(self) -> list[tuple[str | None, "PushedSubplan"]]:
        """(schema.table, what is read of it) for every table this scan reads, in order: its
        joined tables, a tree's leaves' tables, or (None, itself) for a plain scan."""
        if self.tree is not None:
            return self.tree.table_reads()
        if self.join is not None:
            return [(t.name, t.subplan) for t in self.join.tables]
        return [(None, self)]

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
        unknown = set(raw) - {"columns", "filters", "group_by", "aggregates", "where", "order", "limit", "complete",
                              "join", "select", "tree", "one_task"}
        if unknown:
            raise SubplanError(f"pushed subplan has unknown keys {sorted(unknown)}")
        columns = raw.get("columns")
        limit = raw.get("limit")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise SubplanError(f"pushed limit is not a count: {limit!r}")
        return cls(
            columns=None if columns is None else tuple(columns),
            filters=tuple(_predicate(f) for f in raw.get("filters", [])),
            group_by=tuple(g if isinstance(g, str) else _expr(g) for g in raw.get("group_by", [])),
            aggregates=tuple(_aggregate(a) for a in raw.get("aggregates", [])),
            raw=raw,
            where=tuple(_expr(e) for e in raw.get("where", [])),
            order=tuple(_sort_key(k) for k in raw.get("order", [])),
            limit=limit,
            complete=_complete(raw),
            join=_join(raw["join"]) if "join" in raw else None,
            select=tuple(_expr(e) for e in raw.get("select", [])),
            tree=_tree(raw["tree"]) if "tree" in raw else None,
            one_task=bool(raw.get("one_task", False)),
        )


@dataclass(frozen=True)
class TreeLeaf:
    """One scan of a pushed tree: its table (the first one, when joins were pushed into it) and
    its own pushed subplan, rendered as a derived table whose columns the tree renames."""

    table: str
    subplan: PushedSubplan


@dataclass(frozen=True)
class TreeNode:
    op: str  # TREE_NODES
    children: tuple["TreeNode", ...] = ()
    leaf: int | None = None  # scan
    output: tuple[str, ...] = ()  # scan: its columns' names in the tree
    exprs: tuple[tuple[str, Expr], ...] = ()  # project, aggregate: (name, expression)
    cond: Expr | None = None  # filter, join
    join_type: str | None = None
    group_by: tuple[Expr, ...] = ()
    keys: tuple[SortKey, ...] = ()  # sort, limit (top-N)
    limit: int | None = None

    def columns(self) -> list[str]:
        """The node's output columns, by name."""
        if self.op == "scan":
            return list(self.output)
        if self.op in ("project", "aggregate"):
            return [name for name, _ in self.exprs]
        if self.op == "join" and self.join_type not in ("semi", "anti"):
            return self.children[0].columns() + self.children[1].columns()
        return self.children[0].columns()


@dataclass(frozen=True)
class PushedTree:
    leaves: tuple[TreeLeaf, ...]
    root: TreeNode

    def table_reads(self) -> list[tuple[str, PushedSubplan]]:
        """(schema.table, its filters and columns) of every table read, leaf by leaf: a leaf's
        joined tables, or its one table with what the leaf reads of it."""
        out: list[tuple[str, PushedSubplan]] = []
        for leaf in self.leaves:
            if leaf.subplan.join is not None:
                out.extend((t.name, t.subplan) for t in leaf.subplan.join.tables)
            else:
                out.append((leaf.table, leaf.subplan.table_part()))
        return out

    def leaf_reads(self) -> list[list[int]]:
        """For each leaf, the positions of its tables in `table_reads()`."""
        out, at = [], 0
        for leaf in self.leaves:
            n = len(leaf.subplan.join.tables) if leaf.subplan.join is not None else 1
            out.append(list(range(at, at + n)))
            at += n
        return out


def _tree(raw: dict) -> PushedTree:
    if not isinstance(raw, dict) or set(raw) - {"leaves", "root"}:
        raise SubplanError(f"a pushed tree has leaves and a root: {raw!r}")
    leaves = []
    for leaf in raw.get("leaves", []):
        if not isinstance(leaf, dict) or not isinstance(leaf.get("table"), str):
            raise SubplanError(f"a pushed tree's leaf names its table: {leaf!r}")
        sub = PushedSubplan.from_dict(leaf.get("pushed", {}))
        if sub.tree is not None:
            raise SubplanError("a pushed tree's leaf is a scan, not another tree")
        leaves.append(TreeLeaf(leaf["table"], sub))
    if len(leaves) < 1:
        raise SubplanError("a pushed tree has no leaves")
    root = _node(raw.get("root"), len(leaves), top=True)
    seen: set[str] = set()
    _check_names(root, seen)
    return PushedTree(tuple(leaves), root)


def _check_names(node: TreeNode, seen: set[str]) -> None:
    """Every node's outputs are distinct names (each SELECT's columns resolve to one), and a
    node passes on or defines each name once; the same subplan may appear in two branches (Spark
    copies a semi join's subquery below an aggregate), each branch a scope of its own."""
    for child in node.children:
        _check_names(child, set())
    names = node.columns()
    if len(set(names)) != len(names):
        raise SubplanError(f"pushed tree node {node.op} outputs a column twice: {names}")
    inputs = {c for child in node.children for c in child.columns()}
    for name, e in node.exprs:
        if name in inputs and not (e.form == "col" and e.name == name):
            raise SubplanError(f"pushed tree redefines column {name!r}")
    for e in (node.cond, *node.group_by, *(e for _, e in node.exprs), *(k.expr for k in node.keys)):
        for sub in _subqueries(e):
            _check_names(sub, set())


def _subqueries(e: Expr | None) -> list[TreeNode]:
    if e is None:
        return []
    out = [e.plan] if e.form == "subquery" else []
    for a in e.args:
        out.extend(_subqueries(a))
    return out


def _named(raw: list, leaves: int) -> tuple[tuple[str, Expr], ...]:
    out = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "expr" not in item:
            raise SubplanError(f"a pushed tree's output is a name and an expression: {item!r}")
        out.append((item["name"], _expr(item["expr"], leaves)))
    return tuple(out)


def _node(raw, leaves: int, top: bool = False) -> TreeNode:
    if not isinstance(raw, dict) or raw.get("node") not in TREE_NODES:
        raise SubplanError(f"unknown pushed tree node {raw!r}")
    op = raw["node"]
    if op == "scan":
        leaf = raw.get("leaf")
        output = raw.get("output")
        if not isinstance(leaf, int) or not 0 <= leaf < leaves or not output or not all(isinstance(o, str) for o in output):
            raise SubplanError(f"a pushed tree scan names a leaf and its outputs: {raw!r}")
        return TreeNode("scan", leaf=leaf, output=tuple(output))
    if op == "join":
        if raw.get("type") not in TREE_JOIN_TYPES:
            raise SubplanError(f"unknown pushed tree join type {raw!r}")
        cond = _expr(raw["on"], leaves) if raw.get("on") is not None else None
        return TreeNode("join", (_node(raw.get("left"), leaves), _node(raw.get("right"), leaves)), cond=cond,
                        join_type=raw["type"])
    child = (_node(raw.get("child"), leaves),)
    if op == "project":
        return TreeNode("project", child, exprs=_named(raw.get("exprs", []), leaves))
    if op == "filter":
        if "cond" not in raw:
            raise SubplanError(f"a pushed tree filter has no condition: {raw!r}")
        return TreeNode("filter", child, cond=_expr(raw["cond"], leaves))
    if op == "aggregate":
        return TreeNode("aggregate", child, exprs=_named(raw.get("exprs", []), leaves),
                        group_by=tuple(_expr(g, leaves) for g in raw.get("group_by", [])))
    keys = tuple(_tree_key(k, leaves) for k in raw.get("keys", []))
    if op == "sort":
        if not top:
            raise SubplanError("a pushed tree sorts only at its root (a nested order means nothing in SQL)")
        return TreeNode("sort", child, keys=keys)
    limit = raw.get("limit")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise SubplanError(f"pushed tree limit is not a count: {raw!r}")
    return TreeNode("limit", child, keys=keys, limit=limit)


def _tree_key(raw: dict, leaves: int) -> SortKey:
    if not isinstance(raw, dict) or "expr" not in raw:
        raise SubplanError(f"unknown pushed tree sort key {raw!r}")
    return SortKey(_expr(raw["expr"], leaves), None, bool(raw.get("asc", True)), bool(raw.get("nulls_first", True)))


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
    if raw["fn"] == "avg":  # typed: the division needs the input's scale and the result's
        arg = _expr(raw["arg"]) if "arg" in raw else None
        into, of = decimal_type(raw.get("type", "")), decimal_type(arg.type) if arg is not None else None
        if into is None or of is None or into[1] < of[1]:
            raise SubplanError(f"a pushed AVG takes a typed decimal to a decimal of no smaller scale: {raw!r}")
        return Aggregate("avg", arg=arg, type=raw["type"])
    return Aggregate(raw["fn"], raw.get("col"), _expr(raw["arg"]) if "arg" in raw else None)


def _complete(raw: dict) -> bool:
    """The "complete" flag; an AVG is only ever pushed complete (it has no partial form here)."""
    complete = bool(raw.get("complete", False))
    if not complete and any(isinstance(a, dict) and a.get("fn") == "avg" for a in raw.get("aggregates", [])):
        raise SubplanError("a pushed AVG is computed whole: its aggregate must be complete")
    return complete


def _sort_key(raw: dict) -> SortKey:
    if "output" in raw:
        return SortKey(None, int(raw["output"]), bool(raw.get("asc", True)), bool(raw.get("nulls_first", True)))
    if "expr" in raw:
        return SortKey(_expr(raw["expr"]), None, bool(raw.get("asc", True)), bool(raw.get("nulls_first", True)))
    raise SubplanError(f"unknown pushed sort key {raw!r}")


def _join(raw: dict) -> PushedJoin:
    tables = tuple(JoinedTable(t["table"], PushedSubplan.from_dict(t.get("pushed", {}))) for t in raw.get("tables", []))
    steps = []
    for s in raw.get("steps", []):
        if s.get("type") not in JOIN_TYPES:
            raise SubplanError(f"unknown pushed join type {s!r}")
        steps.append(JoinStep(s["type"], _expr(s["on"])))
    if len(tables) < 2 or len(steps) != len(tables) - 1:
        raise SubplanError(f"a pushed join needs n tables and n - 1 steps: {raw!r}")
    for t in tables:
        if t.subplan.join is not None or t.subplan.aggregating or t.subplan.order or t.subplan.limit is not None:
            raise SubplanError(f"a joined table carries only columns and filters: {t.name}")
    split = raw.get("split")
    if split is not None and not 0 <= split < len(tables):
        raise SubplanError(f"pushed join split {split!r} names no table")
    return PushedJoin(tables, tuple(steps), split)


def _expr(raw: dict, leaves: int | None = None) -> Expr:
    """A typed expression; with `leaves` (inside a pushed tree) also aggregates and subqueries."""
    if not isinstance(raw, dict):
        raise SubplanError(f"pushed expression is not an object: {raw!r}")
    t = raw.get("type", "")
    if leaves is not None and "agg" in raw:
        fn = raw["agg"]
        args = tuple(_expr(a, leaves) for a in raw.get("args", []))
        if fn not in TREE_AGGREGATES or len(args) != (0 if fn == "count_star" else 1):
            raise SubplanError(f"unknown pushed tree aggregate {raw!r}")
        return Expr("agg", t, fn, args=args, distinct=bool(raw.get("distinct", False)))
    if leaves is not None and raw.get("op") == "/":
        args = tuple(_expr(a, leaves) for a in raw.get("args", []))
        if len(args) != 2 or not all(_is_decimal(x) for x in (t, *(a.type for a in args))):
            raise SubplanError(f"a pushed division takes two decimals to a decimal: {raw!r}")
        return Expr("op", t, "/", args=args)
    if leaves is not None and "subquery" in raw:
        plan = _node(raw["subquery"], leaves)
        if len(plan.columns()) != 1:
            raise SubplanError(f"a scalar subquery has one column: {raw!r}")
        return Expr("subquery", t, plan=plan)
    if "col" in raw:
        table = raw.get("table")
        return Expr("col", t, raw["col"], table=None if table is None else int(table))
    if "lit" in raw:
        return Expr("lit", t, value=_literal(raw["lit"]))
    if raw.get("op") in EXPRESSION_OPS:
        return Expr("op", t, raw["op"], args=tuple(_expr(a, leaves) for a in raw.get("args", [])), field=raw.get("field"))
    raise SubplanError(f"unknown pushed expression {raw!r}")


def decimal_type(spark_type: str) -> tuple[int, int] | None:
    """(precision, scale) of a Spark `decimal(p,s)` type name, else None."""
    t = spark_type.strip().lower().replace(" ", "")
    if not (t.startswith("decimal(") and t.endswith(")")):
        return None
    try:
        p, s = (int(x) for x in t[len("decimal("):-1].split(","))
    except ValueError:
        return None
    return (p, s) if 0 <= s <= p <= 38 and p > 0 else None


def _is_decimal(spark_type: str) -> bool:
    return decimal_type(spark_type) is not None
