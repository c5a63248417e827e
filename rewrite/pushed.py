"""The pushed plan: the one form of everything Spark hands our readers (issue 26).

A scan's filters, projection, aggregate and top-N, a join Spark pushed through DSv2, and a whole
subtree of the query (HtapSubtreeStrategy) are all the same thing: a small relational plan over
table reads. The Java shim's one translator (catalog/java/io/sparkhtap/PlanTranslator.java and
ExprTranslator.java) writes it as JSON; `PushedPlan.from_json` parses and checks it once at the
boundary, and `htap.rewrite.render` is its one renderer (DuckDB over the replica, Postgres and
MySQL/MariaDB on the source).

JSON form (version 2):
  {"ir": 2,
   "scans": [<scan>, ...],        # table reads; a scan node names one by position
   "root": <node>,
   "split": k,                    # optional: scan k's partitions are the tasks (each reads its
                                  # own of scan k, every other scan whole); absent: one task
   "co_split": [[j, c], ...],     # optional, with split: scan j is joined to scan k by equality of
                                  # k's partition column with j's column c, so each task reads only
                                  # j's rows with c in its partitions' key range (co-partitioned)
   "split_tasks": n}              # optional, with split: at most n tasks, each a run of neighbouring
                                  # partitions of scan k; absent: one task per partition
  <scan>  := {"table": "schema.name", "columns": [c, ...], "filter": [<expr>, ...]}
             # the table's columns read (in order; may be empty: only rows are wanted) and the
             # conjuncts every read of the table applies (over table columns; those on the first
             # key column also prune partitions)
  <node>  := {"node": "scan", "scan": k, "output": [name, ...]}    # scan k's columns, renamed
           | {"node": "project", "child": <node>, "exprs": [<named>, ...]}
           | {"node": "filter", "child": <node>, "cond": <expr>}
           | {"node": "join", "type": JOIN, "left": <node>, "right": <node>, "on": <expr>}
                 # "on" optional; semi/anti: [NOT] EXISTS; "existence": the left's rows and one
                 # more boolean column named "exists": whether a right row matches (EXISTS / IN
                 # under OR or NOT)
           | {"node": "aggregate", "child": <node>, "group_by": [<expr>, ...], "exprs": [<named>, ...],
              "partial": bool}    # partial: per task, Spark merges (decimal SUMs reported in
                                  # their input's type: htap.pushdown.partials splits rows)
           | {"node": "window", "child": <node>, "exprs": [<named>, ...]}
                 # the child's columns, then one column per expression of window functions
                 # ("over" expressions; AVG is a SUM over a COUNT, both over the window)
           | {"node": "union", "children": [<node>, ...], "output": [name, ...]}   # UNION ALL
           | {"node": "expand", "child": <node>, "projections": [[<expr>, ...], ...], "output": [name, ...]}
                 # every child row once per projection (Spark's grouping sets / ROLLUP / CUBE)
           | {"node": "sort", "child": <node>, "keys": [<key>, ...]}        # only at the root
           | {"node": "limit", "child": <node>, "limit": n, "offset": m, "keys": [<key>, ...]}
                 # keys: a top-N; offset optional
  <named> := {"name": name, "expr": <expr>}
  <key>   := {"expr": <expr>, "asc": bool, "nulls_first": bool}
  <expr>  := {"col": name, "type": t} | {"lit": <lit>, "type": t}
           | {"op": OP, "type": t, "args": [<expr>, ...]}  (+ "field" for "extract"; "CHAR_PAD":
             [a string, its CHAR length n], padded with spaces to n characters when shorter)
           | {"agg": AGG, "distinct": bool, "args": [<expr>], "type": t}   # in aggregate/window nodes
           | {"subquery": <node>, "type": t}                              # uncorrelated, scalar
           | {"over": <agg or {"win": WIN, "args": [...], "type": t}>, "partition_by": [<expr>],
              "order_by": [<key>], "frame": {"kind": "rows"|"range", "lower": n|null, "upper": n|null},
              "type": t}                                                  # in window nodes
  <lit>   := {"type": "null"|"boolean"|"long"|"double"|"decimal"|"string"|"date"|"timestamp"
                      |"timestamp_ntz", "value": ...}    # timestamp: epoch microseconds (UTC)
"/" and "DIV" are Spark's division of doubles or decimals (the quotient rounded HALF_UP to the
type's scale): "/" gives NULL for a zero divisor (legacy mode; AVG's count), "DIV" raises (ANSI).
Every type `t` is Spark's result type (`int`, `decimal(12,2)`, `string`, ...): renderers cast to
it, so every target computes in Spark's precision and scale. Names are unique in the plan (the
shim names columns after Spark's expression ids), so a name resolves to one column in any scope.
A frame bound is an offset from the current row (negative: preceding; null: unbounded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from htap.errors import HtapError

IR_VERSION = 2
LITERAL_TYPES = ("null", "boolean", "long", "double", "decimal", "string", "date", "timestamp", "timestamp_ntz")
NODES = ("scan", "project", "filter", "join", "aggregate", "window", "union", "expand", "sort", "limit")
JOIN_TYPES = ("inner", "cross", "left", "right", "full", "semi", "anti", "existence")
AGGREGATES = ("sum", "count", "count_star", "min", "max")
WINDOW_FUNCTIONS = ("row_number", "rank", "dense_rank", "lag", "lead")
OPS = (
    "=", "<>", "<=>", "<", "<=", ">", ">=", "AND", "OR", "NOT", "IS_NULL", "IS_NOT_NULL", "IN",
    "STARTS_WITH", "ENDS_WITH", "CONTAINS", "LIKE", "+", "-", "*", "/", "DIV", "NEG", "CASE_WHEN", "COALESCE",
    "SUBSTRING", "extract", "cast", "CHAR_PAD", "ABS", "CHAR_LENGTH", "CONCAT", "TRIM", "LTRIM", "RTRIM", "DATE_ADD",
    "DATE_DIFF",
)


class PlanError(HtapError):
    """A pushed plan the reader does not understand (a shim/reader version mismatch, or a bug)."""


@dataclass(frozen=True)
class Literal:
    type: str
    value: object


@dataclass(frozen=True)
class Frame:
    kind: str  # rows | range
    lower: int | None  # offset from the current row; None: unbounded preceding
    upper: int | None  # None: unbounded following


@dataclass(frozen=True)
class Expr:
    """A typed expression; `type` is Spark's result type."""

    form: str  # col | lit | op | agg | win | subquery | over
    type: str = ""
    name: str | None = None  # the column (col), the operation (op), the function (agg, win)
    value: Literal | None = None  # lit
    args: tuple["Expr", ...] = ()  # op, agg, win; over: (the function,)
    field: str | None = None  # extract: YEAR, MONTH, DAY, QUARTER
    distinct: bool = False  # agg
    plan: "Node | None" = None  # subquery
    partition_by: tuple["Expr", ...] = ()  # over
    order_by: tuple["SortKey", ...] = ()  # over
    frame: Frame | None = None  # over

    @classmethod
    def column(cls, name: str, type: str = "") -> "Expr":
        return cls("col", type, name)

    @classmethod
    def literal(cls, lit: Literal, type: str) -> "Expr":
        return cls("lit", type, value=lit)

    @classmethod
    def call(cls, op: str, type: str, *args: "Expr") -> "Expr":
        return cls("op", type, op, args=tuple(args))

    def columns(self) -> set[str]:
        """Column names this expression reads in its own scope (not inside a subquery)."""
        out = {self.name} if self.form == "col" and self.name else set()
        for a in (*self.args, *self.partition_by, *(k.expr for k in self.order_by)):
            out |= a.columns()
        return out

    def aggregates(self) -> bool:
        """Whether an aggregate function appears in this expression's own scope."""
        return self.form == "agg" or any(
            a.aggregates() for a in (*self.args, *self.partition_by, *(k.expr for k in self.order_by)))

    def subqueries(self) -> list["Node"]:
        out = [self.plan] if self.form == "subquery" and self.plan is not None else []
        for a in (*self.args, *self.partition_by, *(k.expr for k in self.order_by)):
            out.extend(a.subqueries())
        return out


@dataclass(frozen=True)
class SortKey:
    expr: Expr
    asc: bool = True
    nulls_first: bool = True


@dataclass(frozen=True)
class Scan:
    """One table read: its columns (in order) and the conjuncts every read of it applies."""

    table: str  # schema.name
    columns: tuple[str, ...]
    filter: tuple[Expr, ...] = ()

    def referenced(self) -> set[str]:
        """Every table column the read touches (its outputs and its filter's)."""
        out = set(self.columns)
        for f in self.filter:
            out |= f.columns()
        return out


@dataclass(frozen=True)
class Node:
    op: str  # NODES
    children: tuple["Node", ...] = ()
    scan: int | None = None  # scan
    output: tuple[str, ...] = ()  # scan, union, expand: the node's column names
    exprs: tuple[tuple[str, Expr], ...] = ()  # project, aggregate, window: (name, expression)
    cond: Expr | None = None  # filter, join
    join_type: str | None = None
    group_by: tuple[Expr, ...] = ()
    partial: bool = False  # aggregate
    projections: tuple[tuple[Expr, ...], ...] = ()  # expand
    keys: tuple[SortKey, ...] = ()  # sort, limit (top-N)
    limit: int | None = None
    offset: int = 0

    EXISTS = "exists"  # the existence join's extra column: named in `output`

    def columns(self) -> list[str]:
        """The node's output columns, by name."""
        if self.op in ("scan", "union", "expand"):
            return list(self.output)
        if self.op in ("project", "aggregate"):
            return [name for name, _ in self.exprs]
        if self.op == "window":
            return self.children[0].columns() + [name for name, _ in self.exprs]
        if self.op == "join":
            if self.join_type in ("semi", "anti"):
                return self.children[0].columns()
            if self.join_type == "existence":
                return self.children[0].columns() + list(self.output)
            return self.children[0].columns() + self.children[1].columns()
        return self.children[0].columns()

    def expressions(self) -> list[Expr]:
        """Every expression the node holds (its own, not its children's)."""
        out = [e for _, e in self.exprs] + list(self.group_by) + [k.expr for k in self.keys]
        if self.cond is not None:
            out.append(self.cond)
        for p in self.projections:
            out.extend(p)
        return out

    def walk(self):
        """This node and every node below it, subqueries included (pre-order)."""
        yield self
        for e in self.expressions():
            for sub in e.subqueries():
                yield from sub.walk()
        for c in self.children:
            yield from c.walk()


@dataclass(frozen=True)
class PushedPlan:
    scans: tuple[Scan, ...]
    root: Node
    split: int | None = None  # the scan whose partitions are the tasks; None: one task
    # (scan j, column c): each task reads scan j's rows whose c lies in its split partition's key
    # range (the shim found j joined to the split scan by partition column = c)
    co_split: tuple[tuple[int, str], ...] = ()
    split_tasks: int | None = None  # at most this many tasks, each a run of neighbouring partitions
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def row_scan(self) -> bool:
        """Only a table's rows (its columns, filtered): the root is the one scan."""
        return self.root.op == "scan"

    @property
    def one_task(self) -> bool:
        return self.split is None

    def partial_aggregate(self) -> Node | None:
        """The root aggregate when it is partial (per task; Spark merges), else None."""
        return self.root if self.root.op == "aggregate" and self.root.partial else None

    def to_dict(self) -> dict:
        return self.raw or to_dict(self)

    def rows_of(self, k: int) -> "PushedPlan":
        """A plan of scan k's rows alone: its columns, its filter applied (one table's part)."""
        scan = self.scans[k]
        return PushedPlan((scan,), Node("scan", scan=0, output=scan.columns), split=0)

    def with_filter(self, scan: int, conjuncts: tuple[Expr, ...]) -> "PushedPlan":
        """This plan with more conjuncts on scan `scan` (key ranges of parallel source reads)."""
        scans = list(self.scans)
        scans[scan] = replace(scans[scan], filter=scans[scan].filter + tuple(conjuncts))
        return replace(self, scans=tuple(scans), raw={})

    @classmethod
    def from_json(cls, text: str | None) -> "PushedPlan":
        if not text:
            raise PlanError("no pushed plan: the catalog shim always sends one (an older shim?)")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlanError(f"the pushed plan is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> "PushedPlan":
        if not isinstance(raw, dict):
            raise PlanError(f"a pushed plan is an object: {raw!r}")
        if raw.get("ir") != IR_VERSION:
            raise PlanError(
                f"pushed plan version {raw.get('ir')!r}, this reader reads version {IR_VERSION}: the Spark session's"
                " catalog shim and the Python package on its executors are of different spark-htap versions"
            )
        _keys(raw, {"ir", "scans", "root", "split", "co_split", "split_tasks"}, "pushed plan")
        scans = tuple(_scan(s) for s in _list(raw.get("scans"), "scans"))
        if not scans:
            raise PlanError("a pushed plan reads at least one table")
        root = _node(raw.get("root"), len(scans), top=True)
        split = raw.get("split")
        if split is not None and (not _count(split) or split >= len(scans)):
            raise PlanError(f"pushed plan split {split!r} names no scan")
        co_split = _co_split(raw.get("co_split", []), split, scans)
        split_tasks = raw.get("split_tasks")
        if split_tasks is not None and (split is None or not _count(split_tasks) or split_tasks == 0):
            raise PlanError(f"pushed plan split_tasks {split_tasks!r}: a positive count, with a split scan")
        used = sorted({n.scan for n in root.walk() if n.op == "scan"})
        if used != list(range(len(scans))):
            raise PlanError(f"the pushed plan's scan nodes read scans {used}, it lists {len(scans)}")
        for n in root.walk():
            if n.op == "scan" and len(n.output) != len(scans[n.scan].columns):
                raise PlanError(f"scan node of {scans[n.scan].table} names {len(n.output)} outputs for "
                                f"{len(scans[n.scan].columns)} columns")
        _check_names(root)
        return cls(scans, root, split, co_split, split_tasks, raw)


def _co_split(raw, split: int | None, scans: tuple[Scan, ...]) -> tuple[tuple[int, str], ...]:
    out = []
    for item in _list(raw, "co_split"):
        if (split is None or not isinstance(item, list) or len(item) != 2 or not _count(item[0])
                or item[0] >= len(scans) or item[0] == split or item[1] not in scans[item[0]].columns):
            raise PlanError(f"pushed plan co_split {item!r}: not [another scan than the split one, a column it reads]")
        out.append((item[0], item[1]))
    return tuple(out)


# --- building plans in Python (verification, status, system tables, tests) ---------------------


def table_plan(table: str, columns: list[str] | tuple[str, ...], filter: tuple[Expr, ...] = ()) -> PushedPlan:
    """A plain read of one table's columns (one task per partition)."""
    scan = Scan(table, tuple(columns), tuple(filter))
    return PushedPlan((scan,), Node("scan", scan=0, output=tuple(columns)), split=0)


def count_plan(table: str) -> PushedPlan:
    """`SELECT count(*)` of a table, complete in one task."""
    count = Expr("agg", "bigint", "count_star")
    root = Node("aggregate", (Node("scan", scan=0, output=()),), exprs=(("count", count),))
    return PushedPlan((Scan(table, ()),), root)


def to_dict(plan: PushedPlan) -> dict:
    """The JSON form of a plan built in Python."""
    out = {"ir": IR_VERSION, "scans": [_scan_dict(s) for s in plan.scans], "root": _node_dict(plan.root)}
    if plan.split is not None:
        out["split"] = plan.split
    if plan.co_split:
        out["co_split"] = [[j, c] for j, c in plan.co_split]
    if plan.split_tasks is not None:
        out["split_tasks"] = plan.split_tasks
    return out


def to_json(plan: PushedPlan) -> str:
    return json.dumps(to_dict(plan), separators=(",", ":"))


def _scan_dict(s: Scan) -> dict:
    return {"table": s.table, "columns": list(s.columns), "filter": [expr_dict(e) for e in s.filter]}


def _named_dict(exprs) -> list:
    return [{"name": n, "expr": expr_dict(e)} for n, e in exprs]


def _key_dict(k: SortKey) -> dict:
    return {"expr": expr_dict(k.expr), "asc": k.asc, "nulls_first": k.nulls_first}


def _node_dict(n: Node) -> dict:
    d: dict = {"node": n.op}
    if n.op == "scan":
        return {**d, "scan": n.scan, "output": list(n.output)}
    if n.op == "join":
        d.update(type=n.join_type, left=_node_dict(n.children[0]), right=_node_dict(n.children[1]))
        if n.cond is not None:
            d["on"] = expr_dict(n.cond)
        if n.join_type == "existence":
            d["exists"] = n.output[0]
        return d
    if n.op == "union":
        return {**d, "children": [_node_dict(c) for c in n.children], "output": list(n.output)}
    d["child"] = _node_dict(n.children[0])
    if n.op in ("project", "window"):
        d["exprs"] = _named_dict(n.exprs)
    elif n.op == "filter":
        d["cond"] = expr_dict(n.cond)
    elif n.op == "aggregate":
        d.update(group_by=[expr_dict(g) for g in n.group_by], exprs=_named_dict(n.exprs))
        if n.partial:
            d["partial"] = True
    elif n.op == "expand":
        d.update(projections=[[expr_dict(e) for e in p] for p in n.projections], output=list(n.output))
    elif n.op == "sort":
        d["keys"] = [_key_dict(k) for k in n.keys]
    elif n.op == "limit":
        d.update(limit=n.limit, keys=[_key_dict(k) for k in n.keys])
        if n.offset:
            d["offset"] = n.offset
    return d


def expr_dict(e: Expr) -> dict:
    if e.form == "col":
        return {"col": e.name, "type": e.type}
    if e.form == "lit":
        return {"lit": {"type": e.value.type, "value": e.value.value}, "type": e.type}
    if e.form == "agg":
        return {"agg": e.name, "distinct": e.distinct, "args": [expr_dict(a) for a in e.args], "type": e.type}
    if e.form == "win":
        return {"win": e.name, "args": [expr_dict(a) for a in e.args], "type": e.type}
    if e.form == "subquery":
        return {"subquery": _node_dict(e.plan), "type": e.type}
    if e.form == "over":
        frame = {"kind": e.frame.kind, "lower": e.frame.lower, "upper": e.frame.upper}
        return {"over": expr_dict(e.args[0]), "partition_by": [expr_dict(p) for p in e.partition_by],
                "order_by": [_key_dict(k) for k in e.order_by], "frame": frame, "type": e.type}
    out = {"op": e.name, "type": e.type, "args": [expr_dict(a) for a in e.args]}
    if e.field:
        out["field"] = e.field
    return out


# --- parsing ------------------------------------------------------------------------------------


def _keys(raw: dict, allowed: set[str], what: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        raise PlanError(f"{what} has unknown keys {sorted(unknown)}: {raw!r}")


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise PlanError(f"pushed plan: {what} is a list, not {value!r}")
    return value


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _names(value, what: str) -> tuple[str, ...]:
    names = _list(value, what)
    if not all(isinstance(n, str) and n for n in names):
        raise PlanError(f"pushed plan: {what} are names: {value!r}")
    return tuple(names)


def _scan(raw) -> Scan:
    if not isinstance(raw, dict) or not isinstance(raw.get("table"), str) or "." not in raw["table"]:
        raise PlanError(f"a pushed scan names its table as schema.name: {raw!r}")
    _keys(raw, {"table", "columns", "filter"}, "a pushed scan")
    columns = _names(raw.get("columns", []), "a scan's columns")
    if len(set(columns)) != len(columns):
        raise PlanError(f"a pushed scan reads a column twice: {raw!r}")
    conjuncts = tuple(_expr(e, None) for e in _list(raw.get("filter", []), "a scan's filter"))
    for c in conjuncts:
        if c.type != "boolean":
            raise PlanError(f"a scan's filter conjunct is boolean, not {c.type!r}")
    return Scan(raw["table"], columns, conjuncts)


def _named(raw, scans: int, what: str) -> tuple[tuple[str, Expr], ...]:
    out = []
    for item in _list(raw, what):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "expr" not in item:
            raise PlanError(f"pushed plan: {what} are a name and an expression each: {item!r}")
        out.append((item["name"], _expr(item["expr"], scans)))
    return tuple(out)


_NODE_KEYS = {
    "scan": {"scan", "output"},
    "project": {"child", "exprs"},
    "filter": {"child", "cond"},
    "join": {"type", "left", "right", "on", "exists"},
    "aggregate": {"child", "group_by", "exprs", "partial"},
    "window": {"child", "exprs"},
    "union": {"children", "output"},
    "expand": {"child", "projections", "output"},
    "sort": {"child", "keys"},
    "limit": {"child", "limit", "offset", "keys"},
}


def _node(raw, scans: int, top: bool = False) -> Node:
    if not isinstance(raw, dict) or raw.get("node") not in NODES:
        raise PlanError(f"unknown pushed plan node {raw!r}")
    op = raw["node"]
    _keys(raw, _NODE_KEYS[op] | {"node"}, f"pushed {op} node")
    if op == "scan":
        k = raw.get("scan")
        if not _count(k) or k >= scans:
            raise PlanError(f"a scan node names one of the plan's {scans} scans: {raw!r}")
        return Node("scan", scan=k, output=_names(raw.get("output"), "a scan node's outputs"))
    if op == "join":
        kind = raw.get("type")
        if kind not in JOIN_TYPES:
            raise PlanError(f"unknown pushed join type {raw!r}")
        cond = _expr(raw["on"], scans) if raw.get("on") is not None else None
        if cond is None and kind not in ("inner", "cross", "semi", "anti", "existence"):
            raise PlanError(f"a pushed {kind} join has a condition: {raw!r}")
        output = ()
        if kind == "existence":
            if not isinstance(raw.get("exists"), str):
                raise PlanError(f"an existence join names its boolean column: {raw!r}")
            output = (raw["exists"],)
        children = (_node(raw.get("left"), scans), _node(raw.get("right"), scans))
        return Node("join", children, cond=cond, join_type=kind, output=output)
    if op == "union":
        children = tuple(_node(c, scans) for c in _list(raw.get("children"), "a union's children"))
        output = _names(raw.get("output"), "a union's outputs")
        if len(children) < 2 or any(len(c.columns()) != len(output) for c in children):
            raise PlanError(f"a pushed union has two or more children of {len(output)} columns each")
        return Node("union", children, output=output)
    child = (_node(raw.get("child"), scans),)
    if op in ("project", "window"):
        exprs = _named(raw.get("exprs"), scans, f"a {op} node's outputs")
        if op == "window" and (not exprs or not all(_windowed(e) for _, e in exprs)):
            raise PlanError("a pushed window node computes expressions of window functions")
        return Node(op, child, exprs=exprs)
    if op == "filter":
        if "cond" not in raw:
            raise PlanError(f"a pushed filter has no condition: {raw!r}")
        return Node("filter", child, cond=_expr(raw["cond"], scans))
    if op == "aggregate":
        exprs = _named(raw.get("exprs"), scans, "an aggregate's outputs")
        groups = tuple(_expr(g, scans) for g in _list(raw.get("group_by", []), "an aggregate's groups"))
        return Node("aggregate", child, exprs=exprs, group_by=groups, partial=bool(raw.get("partial", False)))
    if op == "expand":
        output = _names(raw.get("output"), "an expand's outputs")
        projections = tuple(tuple(_expr(e, scans) for e in _list(p, "an expand projection"))
                            for p in _list(raw.get("projections"), "an expand's projections"))
        if not projections or any(len(p) != len(output) for p in projections):
            raise PlanError(f"a pushed expand has projections of {len(output)} expressions each")
        return Node("expand", child, output=output, projections=projections)
    keys = tuple(_key(k, scans) for k in _list(raw.get("keys", []), "sort keys"))
    if op == "sort":
        if not top:
            raise PlanError("a pushed plan sorts only at its root (a nested order means nothing in SQL)")
        return Node("sort", child, keys=keys)
    limit, offset = raw.get("limit"), raw.get("offset", 0)
    if not _count(limit) or not _count(offset):
        raise PlanError(f"a pushed limit and offset are counts: {raw!r}")
    return Node("limit", child, keys=keys, limit=limit, offset=offset)


def _windowed(e: Expr) -> bool:
    """Whether `e` applies a window function, and aggregates only over windows."""
    if e.form == "over":
        return True
    if e.form == "agg":
        return False
    return any(_windowed(a) for a in e.args) and all(_windowed(a) or not _aggregates(a) for a in e.args)


def _aggregates(e: Expr) -> bool:
    return e.form == "agg" or (e.form != "over" and any(_aggregates(a) for a in e.args))


def _key(raw, scans: int | None) -> SortKey:
    if not isinstance(raw, dict) or "expr" not in raw:
        raise PlanError(f"unknown pushed sort key {raw!r}")
    return SortKey(_expr(raw["expr"], scans), bool(raw.get("asc", True)), bool(raw.get("nulls_first", True)))


def _literal(raw) -> Literal:
    if not isinstance(raw, dict) or raw.get("type") not in LITERAL_TYPES:
        raise PlanError(f"unknown pushed literal {raw!r}")
    return Literal(raw["type"], raw.get("value"))


def _frame(raw) -> Frame:
    if not isinstance(raw, dict) or raw.get("kind") not in ("rows", "range"):
        raise PlanError(f"a window frame is rows or range: {raw!r}")
    bounds = raw.get("lower"), raw.get("upper")
    if any(b is not None and (not isinstance(b, int) or isinstance(b, bool)) for b in bounds):
        raise PlanError(f"a window frame's bounds are offsets or null: {raw!r}")
    return Frame(raw["kind"], *bounds)


def _expr(raw, scans: int | None) -> Expr:
    """A typed expression; `scans` (None inside a scan's filter) allows subqueries over the plan's scans."""
    if not isinstance(raw, dict):
        raise PlanError(f"a pushed expression is an object: {raw!r}")
    t = raw.get("type", "")
    if not isinstance(t, str):
        raise PlanError(f"a pushed expression's type is a Spark type name: {raw!r}")
    if "col" in raw:
        if not isinstance(raw["col"], str):
            raise PlanError(f"a pushed column is a name: {raw!r}")
        return Expr("col", t, raw["col"])
    if "lit" in raw:
        return Expr("lit", t, value=_literal(raw["lit"]))
    if "agg" in raw:
        fn = raw["agg"]
        args = tuple(_expr(a, scans) for a in raw.get("args", []))
        if fn not in AGGREGATES or len(args) != (0 if fn == "count_star" else 1):
            raise PlanError(f"unknown pushed aggregate {raw!r}")
        return Expr("agg", t, fn, args=args, distinct=bool(raw.get("distinct", False)))
    if "win" in raw:
        fn = raw["win"]
        args = tuple(_expr(a, scans) for a in raw.get("args", []))
        if fn not in WINDOW_FUNCTIONS:
            raise PlanError(f"unknown pushed window function {raw!r}")
        return Expr("win", t, fn, args=args)
    if "over" in raw:
        fn = _expr(raw["over"], scans)
        if fn.form not in ("agg", "win"):
            raise PlanError(f"a window expression applies an aggregate or a window function: {raw!r}")
        return Expr("over", t, args=(fn,), partition_by=tuple(_expr(p, scans) for p in raw.get("partition_by", [])),
                    order_by=tuple(_key(k, scans) for k in raw.get("order_by", [])), frame=_frame(raw.get("frame")))
    if "subquery" in raw:
        if scans is None:
            raise PlanError("a scan's filter holds no subquery")
        plan = _node(raw["subquery"], scans)
        if len(plan.columns()) != 1:
            raise PlanError(f"a scalar subquery has one column: {raw!r}")
        return Expr("subquery", t, plan=plan)
    if raw.get("op") in OPS:
        args = tuple(_expr(a, scans) for a in raw.get("args", []))
        return Expr("op", t, raw["op"], args=args, field=raw.get("field"))
    raise PlanError(f"unknown pushed expression {raw!r}")


def _check_names(node: Node) -> None:
    """Every node's outputs are distinct names, and a node defines each name once: each SELECT's
    columns resolve to one. The same subplan may appear in two branches (Spark copies a semi
    join's subquery below an aggregate), each branch a scope of its own."""
    for child in node.children:
        _check_names(child)
    names = node.columns()
    if len(set(names)) != len(names):
        raise PlanError(f"pushed {node.op} node outputs a column twice: {names}")
    inputs = {c for child in node.children for c in child.columns()}
    for name, e in node.exprs:
        if name in inputs and node.op != "window" and not (e.form == "col" and e.name == name):
            raise PlanError(f"pushed plan redefines column {name!r}")
    for e in node.expressions():
        for sub in e.subqueries():
            _check_names(sub)


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
