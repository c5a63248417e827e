"""The one renderer of pushed plans (htap.rewrite.pushed) as SQL, built with sqlglot.

Every target gets the same expression tree: DuckDB over the replica, and the source's own SQL on
failover (`htap.rewrite.dialects.for_source` then rewrites what a source dialect spells or
evaluates differently). Built as sqlglot expressions, never by pasting strings, so quoting and
dialect differences (null-safe equality, LIKE escaping, NULL ordering) are sqlglot's job.

How a plan becomes one query:
- Each scan's rows come from the caller (`render_plan(plan, relations)`): a relation holding the
  scan's table columns, its filter already applied (`scan_select` builds one over a table, or
  over the replica's merged current rows).
- A chain of filters, projections, inner/cross joins and semi/anti/existence joins becomes ONE
  flat SELECT (`_Block`): the relations and the other nodes below it (aggregates, outer joins,
  limits, windows, unions) as derived tables joined in one FROM, its filters and [NOT] EXISTS in
  one WHERE, each plan column (Spark's expression ids, unique in the plan) replaced by its
  expression over the derived tables' aliases. Nesting every node as a derived table instead kept
  targets from reordering: DuckDB ran TPC-H Q21's EXISTS / NOT EXISTS over all of lineitem, where
  Spark's plan has them, before the selective joins with nation and orders (9-12x slower).
- Semi and anti joins are EXISTS / NOT EXISTS with the join's condition: Spark's null-aware anti
  join (NOT IN) arrives as `a = b OR (a = b) IS NULL`, which NOT EXISTS turns into exactly SQL's
  NOT IN semantics. An existence join's boolean column is `EXISTS (...)` itself.
- Aggregates are cast to Spark's result type (a partial aggregate's decimal SUMs to 38 digits:
  htap.pushdown.partials fits them), uncorrelated scalar subqueries become `(SELECT ...)`, and
  decimal division is `divide`: integer arithmetic with Spark's HALF_UP rounding, never a
  target's own decimal `/`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Sequence

from sqlglot import exp

from htap.rewrite import dialects
from htap.rewrite.pushed import Expr, Literal, Node, PlanError, PushedPlan, Scan, SortKey, decimal_type

_SQL_TYPES = {
    "tinyint": "SMALLINT", "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT", "float": "REAL",
    "double": "DOUBLE", "string": "TEXT", "boolean": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
}
_BINARY = {
    "=": exp.EQ, "<>": exp.NEQ, "<=>": exp.NullSafeEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE,
    "+": exp.Add, "-": exp.Sub, "*": exp.Mul,
}
_MATCHES = {"STARTS_WITH": "{}%", "ENDS_WITH": "%{}", "CONTAINS": "%{}%"}
_TRIMS = {"TRIM": "BOTH", "LTRIM": "LEADING", "RTRIM": "TRAILING"}  # of spaces
_AGGREGATES = {"count": exp.Count, "sum": exp.Sum, "min": exp.Min, "max": exp.Max}
_WINDOW_FUNCTIONS = {"row_number": exp.RowNumber, "rank": exp.Rank, "dense_rank": exp.DenseRank}
_OUTER_JOINS = {"left": "left", "right": "right", "full": "full"}  # the joins that stay derived tables
ROW = "__row"  # the constant a SELECT of no column selects (no dialect selects nothing)
WIDE_DECIMAL = 28  # a SUM of decimals of more digits may pass 128 bits on its way (dialects.WIDE_SUM)


def column(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def literal(lit: Literal) -> exp.Expression:
    t, v = lit.type, lit.value
    if t == "null" or v is None:
        return exp.Null()
    if t == "boolean":
        return exp.Boolean(this=bool(v))
    if t == "long":
        return exp.Literal.number(int(v))
    if t == "double":
        f = float(v)
        if f != f or f in (float("inf"), float("-inf")):
            return exp.cast(exp.Literal.string(str(f)), "DOUBLE")
        return exp.cast(exp.Literal.number(repr(f)), "DOUBLE")
    if t == "decimal":  # its exact text: a bare 38-digit number is a DOUBLE to DuckDB's parser
        return exp.Literal.string(str(v))
    if t == "string":
        return exp.Literal.string(str(v))
    if t == "date":
        return exp.cast(exp.Literal.string(str(v)), "DATE")
    if t == "timestamp":
        stamp = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(v))
        return exp.cast(exp.Literal.string(stamp.isoformat(sep=" ")), "TIMESTAMPTZ")
    if t == "timestamp_ntz":
        return exp.cast(exp.Literal.string(str(v).replace("T", " ")), "TIMESTAMP")
    raise PlanError(f"cannot render literal {lit!r}")


def sql_type(spark_type: str) -> exp.DataType:
    """Spark's type name (`decimal(12,2)`, `int`, ...) as a SQL type every target spells."""
    t = spark_type.strip().lower()
    if t.startswith("decimal"):
        return exp.DataType.build(t.upper())
    if t not in _SQL_TYPES:
        raise PlanError(f"cannot render Spark type {spark_type!r}")
    return exp.DataType.build(_SQL_TYPES[t])


def _typed(node: exp.Expression, spark_type: str) -> exp.Expression:
    return exp.Cast(this=exp.paren(node, copy=False), to=sql_type(spark_type))


def _widened(node: exp.Expression, spark_type: str) -> exp.Expression:
    decimal = decimal_type(spark_type)
    scale = decimal[1] if decimal else 0
    return exp.Cast(this=exp.paren(node, copy=False), to=exp.DataType.build(f"DECIMAL(38, {scale})"))


def _true(e: Expr) -> bool:
    return e.form == "lit" and e.value.type == "boolean" and e.value.value is True


def _operand(node: exp.Expression) -> exp.Expression:
    """`node` as an operand: parenthesized unless atomic (so that `(a <> b) >= FALSE` binds as meant)."""
    atomic = (exp.Column, exp.Literal, exp.Cast, exp.Paren, exp.Null, exp.Boolean)
    return node if isinstance(node, atomic) else exp.paren(node, copy=False)


def _like(value: exp.Expression, pattern: str) -> exp.Expression:
    like = exp.Like(this=value, expression=exp.Literal.string(pattern))
    return exp.Escape(this=like, expression=exp.Literal.string("\\"))


def expr(e: Expr, inner=None) -> exp.Expression:
    """A typed column, literal or operation. Arithmetic and literals are cast to their Spark type,
    so every target computes in Spark's precision and scale (the shim passes only exact
    operations). `inner(e)` renders what only a plan renders (aggregates, subqueries, windows);
    without it those are an error."""

    def sub(x: Expr) -> exp.Expression:
        return expr(x, inner)

    if e.form == "col":
        return column(e.name)
    if e.form == "lit":
        lit = literal(e.value)
        if e.value.type == "decimal" and not decimal_type(e.type):
            raise PlanError(f"a decimal literal of type {e.type!r}: {e!r}")
        if e.value.type in ("string", "boolean") or not e.type or e.type == "void":
            return lit
        if isinstance(lit, exp.Cast) and lit.to == sql_type(e.type):
            return lit  # spelled as that type already (a special double's CAST('nan' AS DOUBLE))
        return exp.Cast(this=lit, to=sql_type(e.type))
    if e.form != "op":
        if inner is None:
            raise PlanError(f"a {e.form} expression is rendered only inside a pushed plan: {e!r}")
        return inner(e)
    op, args = e.name, e.args
    if op in ("/", "DIV"):
        return _quotient(e, sub(args[0]), sub(args[1]))
    if op in ("+", "-", "*"):
        left, right = sub(args[0]), sub(args[1])
        if op == "*" and e.type.startswith("decimal"):
            # Exact in 38 digits, as in Spark: DuckDB would otherwise compute a product of two
            # decimals in the wider operand's width and overflow where Spark does not.
            left, right = _widened(left, args[0].type), _widened(right, args[1].type)
        return _typed(_BINARY[op](this=exp.paren(left, copy=False), expression=exp.paren(right, copy=False)), e.type)
    if op == "=" and len(args) == 2:
        for a, b in (args, args[::-1]):
            if _true(b) and a.type == "boolean":
                # `p = TRUE` is p in three-valued logic (NULL stays NULL). Spark's V2 form of a
                # boolean placeholder used as a predicate (a general LIKE, TPC-H Q13's NOT LIKE);
                # the bare predicate lets DuckDB push it into the scan and size the table by it.
                return sub(a)
    if op in _BINARY:  # operands that are themselves operations bind as one: `(a <> b) >= FALSE`
        return _BINARY[op](this=_operand(sub(args[0])), expression=_operand(sub(args[1])))
    if op == "NEG":
        return _typed(exp.Neg(this=exp.paren(sub(args[0]), copy=False)), e.type)
    if op == "AND":
        return exp.and_(*(exp.paren(sub(a), copy=False) for a in args))
    if op == "OR":
        return exp.or_(*(exp.paren(sub(a), copy=False) for a in args))
    if op == "NOT":
        return exp.Not(this=exp.paren(sub(args[0]), copy=False))
    if op == "IS_NULL":  # an operation parenthesized: `(a = b) IS NULL` (NOT IN's null-aware condition)
        return exp.Is(this=_operand(sub(args[0])), expression=exp.Null())
    if op == "IS_NOT_NULL":
        return exp.Not(this=exp.Is(this=_operand(sub(args[0])), expression=exp.Null()))
    if op == "IN":
        return exp.In(this=_operand(sub(args[0])), expressions=[sub(a) for a in args[1:]])
    if op in _MATCHES:
        if len(args) != 2 or args[1].form != "lit" or args[1].value.type != "string":
            raise PlanError(f"{op} needs a literal pattern: {e!r}")
        text = str(args[1].value.value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return _like(sub(args[0]), _MATCHES[op].format(text))
    if op == "LIKE":  # Spark's LIKE: '%', '_', and '\\' escaping them (the shim checks the pattern)
        if len(args) != 2 or args[1].form != "lit" or args[1].value.type != "string":
            raise PlanError(f"LIKE needs a literal pattern: {e!r}")
        return _like(sub(args[0]), str(args[1].value.value))
    if op == "CASE_WHEN":
        case = exp.Case()
        for i in range(len(args) // 2):
            case = case.when(sub(args[2 * i]), _typed(sub(args[2 * i + 1]), e.type), copy=False)
        if len(args) % 2:
            case = case.else_(_typed(sub(args[-1]), e.type), copy=False)
        return case
    if op == "COALESCE":
        return exp.Coalesce(this=sub(args[0]), expressions=[sub(a) for a in args[1:]])
    if op == "SUBSTRING":
        return exp.Substring(this=sub(args[0]), start=sub(args[1]), length=sub(args[2]) if len(args) > 2 else None)
    if op == "extract":
        return _typed(exp.Extract(this=exp.var(e.field), expression=sub(args[0])), "int")
    if op == "cast":
        return exp.Cast(this=sub(args[0]), to=sql_type(e.type))
    if op == "ABS":
        return _typed(exp.Abs(this=sub(args[0])), e.type)
    if op == "CHAR_LENGTH":  # characters: LENGTH in DuckDB and Postgres, CHAR_LENGTH in MySQL (sqlglot)
        return _typed(exp.Length(this=sub(args[0])), "int")
    if op == "CONCAT":  # `||` (NULL-propagating in DuckDB and Postgres; MySQL's CONCAT is too)
        out = sub(args[0])
        for a in args[1:]:
            out = exp.DPipe(this=out, expression=sub(a))
        return out
    if op in _TRIMS:
        return exp.Trim(this=sub(args[0]), position=_TRIMS[op])
    if op == "DATE_ADD":
        return _typed(exp.DateAdd(this=sub(args[0]), expression=sub(args[1]), unit=exp.var("DAY")), "date")
    if op == "DATE_DIFF":
        return _typed(exp.DateDiff(this=sub(args[0]), expression=sub(args[1]), unit=exp.var("DAY")), "int")
    if op == "CHAR_PAD":  # Spark's read-side padding of CHAR(n): to n characters when shorter
        if len(args) != 2 or args[1].form != "lit" or args[1].value.type != "long":
            raise PlanError(f"CHAR_PAD takes a string and a literal length: {e!r}")
        value, n = sub(args[0]), exp.Literal.number(int(args[1].value.value))
        shorter = exp.LT(this=exp.Length(this=value), expression=n)
        padded = exp.Pad(this=value.copy(), expression=n.copy(), fill_pattern=exp.Literal.string(" "), is_left=False)
        return exp.Case().when(shorter, padded).else_(value.copy())
    raise PlanError(f"cannot render expression {e!r}")


# --- division (Spark's `/` of doubles and decimals, and its AVG of decimals) ---------------------


def _quotient(e: Expr, num: exp.Expression, den: exp.Expression) -> exp.Expression:
    """Spark's `/`: "/" gives NULL for a zero divisor (legacy mode, and AVG's `if (count = 0)
    null`), "DIV" raises as ANSI mode does (the dialect spells the raise: dialects.DIVIDE_BY_ZERO);
    doubles divide as IEEE everywhere, decimals by `divide`."""
    a, b = e.args
    if decimal_type(e.type):
        value = divide(num, a.type, den, b.type, e.type)  # NULL for a zero divisor
    elif e.type == "double" and a.type == "double" and b.type == "double":
        value = exp.Div(this=exp.paren(num, copy=False),
                        expression=exp.Nullif(this=den, expression=exp.Literal.number(0)), typed=False, safe=False)
    else:
        raise PlanError(f"a pushed division takes doubles or decimals: {e!r}")
    if e.name == "/":
        return value
    if b.form == "lit":  # a literal divisor: raises always (when a row is divided) or never
        if b.value.value is None or float(b.value.value) != 0:
            return value
        raise PlanError(f"a division by a literal zero is left to Spark (it raises only when a row is divided): {e!r}")
    zero = exp.EQ(this=den.copy(), expression=exp.Literal.number(0))
    # typed as the quotient: Postgres spells the raise as a DOUBLE division, and a CASE of a DOUBLE
    # and a NUMERIC branch is DOUBLE there, which rounded every decimal quotient to 17 digits
    # (fuzz seed 32 query 344)
    raised = exp.Cast(this=exp.Anonymous(this=dialects.DIVIDE_BY_ZERO, expressions=[den.copy()]), to=sql_type(e.type))
    return exp.Case().when(zero, raised).else_(value)


def divide(num: exp.Expression, num_type: str, den: exp.Expression, den_type: str, result_type: str) -> exp.Expression:
    """`num / den` for decimals (their Spark types given), as Spark's DecimalDivideWithOverflowCheck
    computes it: the exact quotient rounded HALF_UP (ties away from zero) to the result's scale s;
    NULL when den is 0. The one renderer of decimal division.

    Integer arithmetic on the unscaled values, never a target's own decimal `/` (DuckDB divides
    decimals in DOUBLE, and every engine picks its own quotient scale and rounding). On unscaled
    integers A = num * 10^sa, B = den * 10^sb the result's unscaled value is A * 10^k / B rounded,
    k = s + sb - sa. With n = |A|, d = |B|: q0, r0 = divmod(n, d), then q1, r1 = divmod(r0 * 10^k,
    d), and |result| = q0 * 10^k + q1 + (2 * r1 >= d), signed by A's and B's signs. Dividing the
    remainder (below d) rather than A * 10^k keeps every intermediate within 38 digits when A is
    (Spark's sums are) and d * 10^k fits (a count times 10^4 for AVG). The integers are INT128
    (DuckDB's HUGEINT, as wide as Spark's 38 digits); htap.rewrite.dialects.for_source spells them
    NUMERIC (Postgres) or DECIMAL(65, 0) (MySQL), where they are as exact. An intermediate that
    does not fit raises in the target."""
    result, left, right = decimal_type(result_type), decimal_type(num_type), decimal_type(den_type)
    if result is None or left is None or right is None:
        raise PlanError(f"a pushed division takes decimals: {num_type} / {den_type} -> {result_type}")
    scale = result[1]
    k = scale + right[1] - left[1]
    if k < 0:
        raise PlanError(f"a pushed division to a scale below its dividend's is not rendered: {num_type} -> {result_type}")
    a = _unscaled(num, left[1])
    b = _unscaled(den, right[1])
    n = exp.Abs(this=a)
    d = exp.Nullif(this=exp.Abs(this=b.copy()), expression=_int(0))
    shift = _int(10**k)
    q0 = exp.IntDiv(this=n, expression=d)
    r0 = exp.Mod(this=n.copy(), expression=d.copy())
    t = exp.paren(exp.Mul(this=exp.paren(r0, copy=False), expression=shift), copy=False)
    q1 = exp.IntDiv(this=t, expression=d.copy())
    r1 = exp.Mod(this=t.copy(), expression=d.copy())
    up = exp.Case().when(exp.GTE(this=exp.Mul(this=_int(2), expression=exp.paren(r1, copy=False)), expression=d.copy()),
                         _int(1)).else_(_int(0))
    magnitude = exp.Add(this=exp.Add(this=exp.Mul(this=exp.paren(q0, copy=False), expression=shift.copy()),
                                     expression=exp.paren(q1, copy=False)), expression=up)
    negative = exp.NEQ(this=exp.paren(exp.LT(this=a.copy(), expression=_int(0)), copy=False),
                       expression=exp.paren(exp.LT(this=b.copy(), expression=_int(0)), copy=False))
    signed = exp.Case().when(negative, exp.Neg(this=exp.paren(magnitude, copy=False))).else_(magnitude.copy())
    unit = exp.Cast(this=exp.Literal.string(_unit(scale)), to=exp.DataType.build(f"DECIMAL({max(scale, 1)}, {scale})"))
    value = exp.Mul(this=exp.Cast(this=signed, to=exp.DataType.build("DECIMAL(38, 0)")), expression=unit)
    return exp.Cast(this=exp.paren(value, copy=False), to=sql_type(result_type))


def _int(value: int) -> exp.Expression:
    """An INT128 integer constant (a bare literal would be a narrower type in DuckDB)."""
    return exp.Cast(this=exp.Literal.number(value), to=exp.DataType.build("INT128"))


def _unscaled(value: exp.Expression, scale: int) -> exp.Expression:
    """A decimal of scale `scale` as its unscaled INT128 integer. A product with 10^scale would
    keep the scale (DuckDB's DECIMAL(38, scale) overflows for values Spark holds), so the digits
    are read off the decimal's text at exactly that scale (DuckDB, Postgres and MySQL all print a
    DECIMAL(38, s) in plain notation with s fraction digits), the point dropped."""
    if scale == 0:
        return exp.Cast(this=exp.paren(value, copy=False), to=exp.DataType.build("INT128"))
    fixed = exp.Cast(this=exp.paren(value, copy=False), to=exp.DataType.build(f"DECIMAL(38, {scale})"))
    digits = exp.Anonymous(this="REPLACE", expressions=[exp.Cast(this=fixed, to=exp.DataType.build("TEXT")),
                                                         exp.Literal.string("."), exp.Literal.string("")])
    return exp.Cast(this=digits, to=exp.DataType.build("INT128"))


def _unit(scale: int) -> str:
    """10^-scale as decimal text ('1' for scale 0)."""
    return "1" if scale == 0 else "0." + "0" * (scale - 1) + "1"


# --- plans ----------------------------------------------------------------------------------------


def scan_select(scan: Scan, source: exp.Expression, conjuncts: Sequence[Expr] | None = None) -> exp.Select:
    """A scan's rows: its columns of `source` (a table, or a relation of the table's rows) with
    `conjuncts` (default: the scan's whole filter) applied. A scan of no column selects a constant."""
    outputs = [column(c) for c in scan.columns] or [exp.Literal.number(1).as_(ROW, quoted=True)]
    q = exp.select(*outputs).from_(source, copy=False)
    for c in scan.filter if conjuncts is None else conjuncts:
        q = q.where(exp.paren(expr(c), copy=False), copy=False)
    return q


def render_plan(plan: PushedPlan, relations: Sequence[exp.Expression]) -> exp.Select:
    """The whole plan as one query; `relations[k]` holds scan k's rows (its columns by name, its
    filter applied): a query, or a table. Outputs in the root's column order (read by position)."""
    if len(relations) != len(plan.scans):
        raise PlanError(f"a pushed plan of {len(plan.scans)} scans rendered over {len(relations)} relations")
    if plan.row_scan:
        return _as_query(relations[0], plan.scans[0])
    root = reduce_grouped_joins(plan.root)
    return _Renderer(plan, relations).query(root, top=True)


def _as_query(relation: exp.Expression, scan: Scan) -> exp.Select:
    if isinstance(relation, exp.Select):
        return relation
    return scan_select(dataclasses.replace(scan, filter=()), relation.copy())


def reduce_grouped_joins(node: Node) -> Node:
    """Each inner join of an aggregate on one of its grouping columns (`g = x`) with the aggregate's
    input reduced first to the groups the join can keep: a semi join of that input with the
    smallest part of the other side that yields x (`EXISTS`). Spark decorrelates a correlated
    subquery into such a join (TPC-H Q17: the average quantity per part over all of lineitem,
    200,000 groups, joined with the 204 parts the query selects), and a target runs the aggregate
    whole before the join: DuckDB's own plan of the query text aggregates the selected parts only.

    Exact: a group is kept or dropped whole (its rows share g), and a group whose g no row of the
    other side matches is dropped by the join anyway. The part of the other side used (`_yielding`)
    is reached down inner joins only, each of which keeps a subset of its sides' rows, so the
    values of x it yields are a superset of the other side's; NULL never matches `=`, in the join
    or in the EXISTS."""
    children = tuple(reduce_grouped_joins(c) for c in node.children)
    if children != node.children:
        node = dataclasses.replace(node, children=children)
    if node.op != "join" or node.join_type != "inner" or node.cond is None:
        return node
    for side in (0, 1):
        grouped, other = node.children[side], node.children[1 - side]
        for conjunct in conjuncts(node.cond):
            reduced = _reduced(grouped, other, conjunct)
            if reduced is not None:
                kids = list(node.children)
                kids[side] = reduced
                return dataclasses.replace(node, children=tuple(kids))
    return node


def conjuncts(e: Expr) -> list[Expr]:
    """The AND-ed parts of a condition."""
    if e.form == "op" and e.name == "AND":
        return [c for a in e.args for c in conjuncts(a)]
    return [e]


def _reduced(grouped: Node, other: Node, conjunct: Expr) -> Node | None:
    """`grouped` (filters and projections over an aggregate) with the aggregate's input semi
    joined to the part of `other` that yields the other operand of `conjunct` (`g = x`, g one of
    `grouped`'s columns that is a grouping column of the aggregate), or None."""
    if conjunct.form != "op" or conjunct.name != "=" or len(conjunct.args) != 2:
        return None
    mine = set(grouped.columns())
    for g, x in (conjunct.args, conjunct.args[::-1]):
        if g.form != "col" or g.name not in mine or not x.columns() or not x.columns() <= set(other.columns()):
            continue
        source = _yielding(other, x.columns())
        if source is None:
            continue
        rebuilt = _with_semi_join(grouped, g.name, source, x)
        if rebuilt is not None:
            return rebuilt
    return None


def _yielding(node: Node, columns: set[str]) -> Node | None:
    """The smallest subtree of `node` that still holds `columns`, down inner and cross joins only:
    a join keeps a subset of each side's rows, values unchanged, so the side yields at least every
    value combination the join does. Filters and semi/anti joins are kept, not skipped: they are
    what makes the other side selective."""
    if not columns <= set(node.columns()):
        return None
    if node.op == "join" and node.join_type in ("inner", "cross"):
        for child in node.children:
            found = _yielding(child, columns)
            if found is not None:
                return found
    return node


def _with_semi_join(node: Node, column_name: str, source: Node, x: Expr) -> Node | None:
    """`node` with its aggregate's input semi joined to `source` on `group column = x`, following
    the column down through filters and plain-column projections to the aggregate; None if it is
    not a plain grouping column there."""
    if node.op == "filter":
        child = _with_semi_join(node.children[0], column_name, source, x)
        return None if child is None else dataclasses.replace(node, children=(child,))
    if node.op == "project":
        e = dict(node.exprs).get(column_name)
        if e is None or e.form != "col":
            return None
        child = _with_semi_join(node.children[0], e.name, source, x)
        return None if child is None else dataclasses.replace(node, children=(child,))
    if node.op != "aggregate" or node.partial:
        return None
    e = dict(node.exprs).get(column_name)
    if e is None or e.form != "col" or not any(k.form == "col" and k.name == e.name for k in node.group_by):
        return None
    (child,) = node.children
    if e.name not in child.columns() or set(source.columns()) & set(child.columns()):
        return None
    on = Expr("op", "boolean", "=", args=(e, x))
    return dataclasses.replace(node, children=(Node("join", children=(child, source), cond=on, join_type="semi"),))


class _Renderer:
    def __init__(self, plan: PushedPlan, relations: Sequence[exp.Expression]):
        self.plan = plan
        self.relations = relations
        self.aliases = 0

    def alias(self) -> str:
        self.aliases += 1
        return f"q{self.aliases}"

    def relation(self, node: Node) -> tuple[exp.Expression, dict[str, exp.Expression]]:
        """Scan `node`'s relation under a new alias, and each of its output names as a column."""
        scan = self.plan.scans[node.scan]
        alias = self.alias()
        source = _as_query(self.relations[node.scan], scan).copy()
        names = scan.columns if scan.columns else ()
        return source.subquery(alias, copy=False), {o: column(c, alias) for c, o in zip(names, node.output)}

    def query(self, node: Node, top: bool = False) -> exp.Select:
        """`node` as a query; at the `top`, in the order of the sort or top-N below its
        projections and filters (Spark's rows keep it; a derived table's order is lost)."""
        op = node.op
        if _flattens(node):
            block = self.flat(node)
            q = block.select()
            return q.order_by(*block.order, copy=False) if top and block.order else q
        if op == "scan":
            relation, cols = self.relation(node)
            return _select([e.copy().as_(o, quoted=True) for o, e in cols.items()]).from_(relation, copy=False)
        if op == "join":
            return self.outer_join(node)
        if op == "union":
            return self.union(node)
        child = node.children[0]
        source = self.query(child).subquery(self.alias(), copy=False)
        if op == "aggregate":
            outputs = [self.expr(e, partial=node.partial).as_(n, quoted=True) for n, e in node.exprs]
            if not node.group_by and not any(e.aggregates() for _n, e in node.exprs):
                # a global aggregate is one row, whatever its input: with no aggregate function
                # (constants only, e.g. what is left of an outer join's side that never
                # matches: fuzz seed 21 query 407) SQL would give a row per input row
                counted = _select([exp.Count(this=exp.Star()).as_(ROW, quoted=True)]).from_(source, copy=False)
                if not outputs:
                    return counted
                source = counted.subquery(self.alias(), copy=False)
            q = _select(outputs).from_(source, copy=False)
            if node.group_by:
                q = q.group_by(*(self.group_key(g) for g in node.group_by), copy=False)
            return q
        if op == "window":
            outputs = [column(c) for c in child.columns()] + [self.expr(e).as_(n, quoted=True) for n, e in node.exprs]
            return _select(outputs).from_(source, copy=False)
        if op == "expand":
            return self.expand(node, source)
        q = _select([column(c) for c in child.columns()]).from_(source, copy=False)
        if _sorting(node.keys):
            q = q.order_by(*(self.ordered(k) for k in _sorting(node.keys)), copy=False)
        if op == "limit":
            q = q.limit(node.limit, copy=False)
            if node.offset:
                q = q.offset(node.offset, copy=False)
        return q

    def flat(self, node: Node) -> "_Block":
        """`node` as one FROM list with WHERE conjuncts (see _Block); a node that does not flatten
        (a scan, an outer join, an aggregate, a limit, ...) is one derived table in it."""
        op = node.op
        if op == "scan":
            relation, cols = self.relation(node)
            return _Block([(relation, [])], [], cols)
        if not _flattens(node):
            alias = self.alias()
            cols = {c: column(c, alias) for c in node.columns()}
            order = [self.ordered(k, cols) for k in _sorting(node.keys)] if node.op in ("sort", "limit") else []
            return _Block([(self.query(node).subquery(alias, copy=False), [])], [], cols, order)
        if op == "project":
            block = self.flat(node.children[0])
            block.cols = {n: self.expr(e, block.cols) for n, e in node.exprs}
            return block
        if op == "filter":
            block = self.flat(node.children[0])
            block.where.append(self.expr(node.cond, block.cols))
            return block
        left, right = (self.flat(c) for c in node.children)
        both = dict(left.cols)
        for c, e in right.cols.items():
            if c in both:
                raise PlanError(f"both sides of a pushed join have column {c!r}")
            both[c] = e
        cond = None if node.cond is None else self.expr(node.cond, both)
        left.order = []  # a join keeps no order
        if node.join_type in ("semi", "anti", "existence"):
            exists = exp.Exists(this=right.select([exp.Literal.number(1)], [] if cond is None else [cond]))
            if node.join_type == "existence":
                left.cols[node.output[0]] = exists
            else:
                left.where.append(exists if node.join_type == "semi" else exp.Not(this=exists))
            return left
        if cond is not None:  # on the right's last table: every table of both sides is in scope there
            right.items[-1][1].append(cond)
        return _Block(left.items + right.items, left.where + right.where, both)

    def outer_join(self, node: Node) -> exp.Select:
        left, right = node.children
        la, ra = self.alias(), self.alias()
        sides = {c: column(c, la) for c in left.columns()}
        for c in right.columns():
            if c in sides:
                raise PlanError(f"both sides of a pushed join have column {c!r}")
            sides[c] = column(c, ra)
        lq = self.query(left).subquery(la, copy=False)
        rq = self.query(right).subquery(ra, copy=False)
        q = _select([sides[c] for c in node.columns()]).from_(lq, copy=False)
        if node.cond is None:
            raise PlanError(f"a pushed {node.join_type} join has no condition")
        on = exp.paren(self.expr(node.cond, sides), copy=False)
        return q.join(rq, on=on, join_type=_OUTER_JOINS[node.join_type], copy=False)

    def union(self, node: Node) -> exp.Select:
        """UNION ALL of the children, each as a derived table, columns renamed to the union's."""
        parts = []
        for child in node.children:
            source = self.query(child).subquery(self.alias(), copy=False)
            parts.append(_select([column(c).as_(o, quoted=True) for c, o in zip(child.columns(), node.output)])
                         .from_(source, copy=False))
        q = parts[0]
        for p in parts[1:]:
            q = exp.union(q, p, distinct=False, copy=False)
        return _select([column(o) for o in node.output]).from_(q.subquery(self.alias(), copy=False), copy=False)

    def expand(self, node: Node, source: exp.Expression) -> exp.Select:
        """Every row of the child once per projection: a UNION ALL of one SELECT per projection."""
        parts = []
        for projection in node.projections:
            src = source.copy() if parts else source
            parts.append(_select([self.expr(e).as_(o, quoted=True) for e, o in zip(projection, node.output)])
                         .from_(src, copy=False))
        q = parts[0]
        for p in parts[1:]:
            q = exp.union(q, p, distinct=False, copy=False)
        return _select([column(o) for o in node.output]).from_(q.subquery(self.alias(), copy=False), copy=False)

    def expr(self, e: Expr, cols: dict[str, exp.Expression] | None = None, partial: bool = False) -> exp.Expression:
        """An expression of a node: `expr`, with aggregates, subqueries, window expressions and
        decimal division rendered here; `cols` puts each column's expression in a flat block (or
        its side's qualified column in a join) in place of its name (before the subqueries go
        in: their names are their own scope's)."""
        slots: dict[str, exp.Expression] = {}

        def inner(x: Expr) -> exp.Expression:
            name = f"__slot{len(slots)}_{id(slots)}"
            slots[name] = self.special(x, partial)
            return column(name)

        node = expr(e, inner)
        if cols:
            node = _substituted(node, cols)
        if not slots:
            return node

        def fill(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name in slots:
                return slots[n.name]
            return n

        return node.transform(fill, copy=False)

    def special(self, e: Expr, partial: bool) -> exp.Expression:
        if e.form == "agg":
            return self.aggregate(e, partial)
        if e.form == "subquery":
            return self.query(e.plan).subquery(copy=False)
        if e.form == "over":
            return self.window(e)
        raise PlanError(f"cannot render expression {e!r}")

    def aggregate(self, e: Expr, partial: bool = False) -> exp.Expression:
        node = self.aggregate_call(e)
        if e.name == "sum":
            if partial and decimal_type(e.type):  # as computed, in 38 digits: partials.fit fits it
                return _widened(node, e.type)
            return exp.Cast(this=node, to=sql_type(e.type))  # Spark's result type
        return node

    def aggregate_call(self, e: Expr, in_window: bool = False) -> exp.Expression:
        """The aggregate function itself (Spark's semantics): MIN / MAX of booleans as BOOL_AND /
        BOOL_OR (false < true; Postgres has no MIN of a boolean), a SUM of FLOATs in DOUBLE (as
        Spark sums them; Postgres would in REAL)."""
        if e.name == "count_star":
            return exp.Count(this=exp.Star())
        arg = self.expr(e.args[0])
        if e.name == "sum" and e.args[0].type == "float":
            arg = exp.Cast(this=arg, to=sql_type("double"))
        wide = decimal_type(e.args[0].type) if e.name == "sum" else None
        if wide and wide[0] > WIDE_DECIMAL:  # see dialects.WIDE_SUM
            if e.distinct or in_window:
                # WIDE_SUM's parts cannot be summed DISTINCT, nor over a frame: a running sum in
                # 128 bits may overflow where Spark's (exact, per value) does not (fuzz seed 30)
                raise PlanError(f"a {'DISTINCT' if e.distinct else 'windowed'} SUM of {e.args[0].type} is left to Spark")
            return exp.Anonymous(this=dialects.WIDE_SUM, expressions=[arg, exp.Literal.number(wide[1])])
        if e.name in ("min", "max") and e.type == "boolean" and not e.distinct:
            return (exp.LogicalAnd if e.name == "min" else exp.LogicalOr)(this=arg)
        if e.distinct:
            arg = exp.Distinct(expressions=[arg])
        return _AGGREGATES[e.name](this=arg)

    def group_key(self, g: Expr) -> exp.Expression:
        """A grouping key; a constant one as an expression (a bare constant is an ordinal or an
        error to Postgres), typed."""
        if g.form == "lit":
            return exp.Cast(this=literal(g.value), to=sql_type(g.type if g.type and g.type != "void" else "int"))
        return self.expr(g)

    def window(self, e: Expr) -> exp.Expression:
        fn = e.args[0]
        if fn.form == "agg":  # the aggregate itself over the window, cast to Spark's type after
            call = self.aggregate_call(fn, in_window=True)
            frame = e.frame
        elif fn.name in _WINDOW_FUNCTIONS:
            call, frame = _WINDOW_FUNCTIONS[fn.name](), None
        else:  # lag / lead (input, offset, default); MySQL takes only a bare integer offset
            cls = exp.Lag if fn.name == "lag" else exp.Lead
            value, offset, default = fn.args
            if offset.form != "lit" or offset.value.type != "long":
                raise PlanError(f"{fn.name} takes a literal offset: {fn!r}")
            call, frame = cls(this=self.expr(value), offset=exp.Literal.number(int(offset.value.value)),
                              default=self.expr(default)), None
        window = exp.Window(this=call, partition_by=[self.expr(p) for p in e.partition_by] or None,
                            order=exp.Order(expressions=[self.ordered(k) for k in _sorting(e.order_by)])
                            if _sorting(e.order_by) else None,
                            spec=_frame(frame) if frame is not None else None)
        return exp.Cast(this=window, to=sql_type(e.type))

    def ordered(self, k: SortKey, cols: dict[str, exp.Expression] | None = None) -> exp.Ordered:
        """A sort key with Spark's direction and NULL placement spelled out (engines differ in defaults)."""
        return exp.Ordered(this=self.expr(k.expr, cols), desc=not k.asc, nulls_first=k.nulls_first)


def _sorting(keys) -> list[SortKey]:
    """The sort keys that order anything: a constant key does not (and DuckDB and Postgres refuse
    a bare one)."""
    return [k for k in keys if k.expr.form != "lit"]


def _frame(frame) -> exp.WindowSpec:
    def bound(offset: int | None, lower: bool) -> tuple[str, str | None]:
        if offset is None:
            return "UNBOUNDED", "PRECEDING" if lower else "FOLLOWING"
        if offset == 0:
            return "CURRENT ROW", None
        return str(abs(offset)), "PRECEDING" if offset < 0 else "FOLLOWING"

    start, start_side = bound(frame.lower, True)
    end, end_side = bound(frame.upper, False)
    return exp.WindowSpec(kind=frame.kind.upper(), start=start, start_side=start_side, end=end, end_side=end_side)


def _select(outputs: list[exp.Expression]) -> exp.Select:
    """SELECT the outputs; a node Spark needs only the rows of (`count(*)` above a join) selects
    a constant, as no SQL dialect selects nothing."""
    return exp.select(*outputs) if outputs else exp.select(exp.Literal.number(1).as_(ROW, quoted=True))


def _substituted(node: exp.Expression, cols: dict[str, exp.Expression]) -> exp.Expression:
    """Each column named in `cols` replaced by its expression there: a qualified column (a
    correlated EXISTS must not resolve a name to the wrong scope) or a projected expression,
    parenthesized so that it binds as one operand."""

    def put(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in cols:
            e = cols[n.name].copy()
            return e if isinstance(e, (exp.Column, exp.Literal)) else exp.paren(e, copy=False)
        return n

    return node.transform(put, copy=False)


def _flattens(node: Node) -> bool:
    """Filters, projections, inner and cross joins and semi/anti/existence joins render as one flat
    SELECT (_Block): every one of them commutes with an inner join above it, so the target's
    optimizer is free to order all the joins and to run an EXISTS after the selective ones (TPC-H
    Q21's NOT EXISTS over lineitem below the joins with nation and orders: 11.7x DuckDB's own time
    as nested derived tables). Outer joins stay derived tables: a filter does not commute with the
    null-supplying side."""
    return node.op in ("project", "filter") or (
        node.op == "join" and node.join_type in ("inner", "cross", "semi", "anti", "existence"))


@dataclasses.dataclass
class _Block:
    """A flattened chain as the parts of one SELECT: relations joined in order (each after the
    first with its ON conjuncts; none: CROSS JOIN), WHERE conjuncts (filters, EXISTS / NOT EXISTS
    for semi and anti joins) and each plan column's expression over the relations' aliases.

    Why it is exact: a filter, a projection and an EXISTS are functions of one row, so evaluating
    them after inner joins rather than before gives the same rows (the join only pairs or drops
    rows); a semi/anti join's condition names only its two sides' columns, which keep their
    values in the flat FROM. NOT IN's null-aware condition (`a = b OR (a = b) IS NULL`) stays
    inside its NOT EXISTS, untouched."""

    items: list[tuple[exp.Expression, list[exp.Expression]]]
    where: list[exp.Expression]
    cols: dict[str, exp.Expression]
    order: list[exp.Ordered] = dataclasses.field(default_factory=list)  # of a sorted item, through projections

    def select(self, outputs: list[exp.Expression] | None = None, also: Sequence[exp.Expression] = ()) -> exp.Select:
        """SELECT the block's columns (or `outputs`) FROM its relations WHERE its conjuncts and `also`."""
        if outputs is None:
            outputs = [e.copy().as_(n, quoted=True) for n, e in self.cols.items()]
        (first, _), *rest = self.items
        q = _select(outputs).from_(first, copy=False)
        for relation, on in rest:
            if on:
                q = q.join(relation, on=_conjunction(on), join_type="inner", copy=False)
            else:
                q = q.join(relation, join_type="cross", copy=False)
        where = [*self.where, *also]
        return q.where(_conjunction(where), copy=False) if where else q


def _conjunction(parts: Sequence[exp.Expression]) -> exp.Expression:
    return exp.and_(*(exp.paren(c, copy=False) for c in parts), copy=False)
