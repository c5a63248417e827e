"""Render a pushed subplan as SQL with sqlglot, for DuckDB (the replica) or a source dialect.

Built as sqlglot expressions, never by pasting strings, so quoting and dialect differences
(null-safe equality, LIKE escaping, timestamp literals) are sqlglot's job.
"""

from __future__ import annotations

import datetime as dt

from sqlglot import exp

from htap.rewrite.subplan import Aggregate, Expr, Literal, Predicate, PushedSubplan, SortKey, SubplanError, decimal_type

_CMP = {"eq": exp.EQ, "eq_null_safe": exp.NullSafeEQ, "gt": exp.GT, "ge": exp.GTE, "lt": exp.LT, "le": exp.LTE}


def column(name: str, table: int | None = None) -> exp.Column:
    """A column; in a joined scan qualified by its table's alias (`table_alias`)."""
    return exp.column(name, table=None if table is None else table_alias(table), quoted=True)


def table_alias(position: int) -> str:
    """The alias of the table at `position` of a joined scan."""
    return f"t{position}"


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
    if t == "decimal":
        return exp.Literal.number(str(v))
    if t == "string":
        return exp.Literal.string(str(v))
    if t == "date":
        return exp.cast(exp.Literal.string(str(v)), "DATE")
    if t == "timestamp":
        stamp = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(v))
        return exp.cast(exp.Literal.string(stamp.isoformat(sep=" ")), "TIMESTAMPTZ")
    if t == "timestamp_ntz":
        return exp.cast(exp.Literal.string(str(v).replace("T", " ")), "TIMESTAMP")
    raise SubplanError(f"cannot render literal {lit!r}")


def _like_pattern(op: str, text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return {"starts_with": f"{escaped}%", "ends_with": f"%{escaped}", "contains": f"%{escaped}%"}[op]


def predicate(p: Predicate) -> exp.Expression:
    if p.op in _CMP:
        return _CMP[p.op](this=column(p.col), expression=literal(p.value))
    if p.op == "in":
        return exp.In(this=column(p.col), expressions=[literal(v) for v in p.values])
    if p.op == "is_null":
        return exp.Is(this=column(p.col), expression=exp.Null())
    if p.op == "is_not_null":
        return exp.Not(this=exp.Is(this=column(p.col), expression=exp.Null()))
    if p.op in ("starts_with", "ends_with", "contains"):
        like = exp.Like(this=column(p.col), expression=exp.Literal.string(_like_pattern(p.op, str(p.value.value))))
        return exp.Escape(this=like, expression=exp.Literal.string("\\"))
    if p.op == "and":
        return exp.and_(*(exp.paren(predicate(a), copy=False) for a in p.args))
    if p.op == "or":
        return exp.or_(*(exp.paren(predicate(a), copy=False) for a in p.args))
    if p.op == "not":
        return exp.Not(this=exp.paren(predicate(p.args[0]), copy=False))
    raise SubplanError(f"cannot render filter {p!r}")


# --- typed expressions (Spark's V2 expressions) -------------------------------------------------

_SQL_TYPES = {
    "tinyint": "SMALLINT", "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT", "float": "REAL",
    "double": "DOUBLE", "string": "TEXT", "boolean": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
}
_BINARY = {
    "=": exp.EQ, "<>": exp.NEQ, "<=>": exp.NullSafeEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE,
    "+": exp.Add, "-": exp.Sub, "*": exp.Mul,
}
_MATCHES = {"STARTS_WITH": "starts_with", "ENDS_WITH": "ends_with", "CONTAINS": "contains"}


def sql_type(spark_type: str) -> exp.DataType:
    """Spark's type name (`decimal(12,2)`, `int`, ...) as a SQL type every target spells."""
    t = spark_type.strip().lower()
    if t.startswith("decimal"):
        return exp.DataType.build(t.upper())
    if t not in _SQL_TYPES:
        raise SubplanError(f"cannot render Spark type {spark_type!r}")
    return exp.DataType.build(_SQL_TYPES[t])


def _typed(node: exp.Expression, spark_type: str) -> exp.Expression:
    return exp.Cast(this=exp.paren(node, copy=False), to=sql_type(spark_type))


def _widened(node: exp.Expression, spark_type: str) -> exp.Expression:
    decimal = decimal_type(spark_type)
    scale = decimal[1] if decimal else 0
    return exp.Cast(this=exp.paren(node, copy=False), to=exp.DataType.build(f"DECIMAL(38, {scale})"))


def _true(e: Expr) -> bool:
    return e.form == "lit" and e.value.type == "boolean" and e.value.value is True


def expr(e: Expr) -> exp.Expression:
    """A typed expression. Arithmetic and literals are cast to their Spark type, so every
    target computes in Spark's precision and scale (exact: V2Json passes only exact operations)."""
    if e.form == "col":
        return column(e.name, e.table)
    if e.form == "lit":
        lit = literal(e.value)
        if e.value.type in ("string", "boolean") or not e.type or e.type == "void":
            return lit
        return exp.Cast(this=lit, to=sql_type(e.type))
    op, args = e.name, e.args
    if op in ("+", "-", "*"):
        left, right = expr(args[0]), expr(args[1])
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
                return expr(a)
    if op in _BINARY:
        return _BINARY[op](this=expr(args[0]), expression=expr(args[1]))
    if op == "NEG":
        return _typed(exp.Neg(this=exp.paren(expr(args[0]), copy=False)), e.type)
    if op == "AND":
        return exp.and_(*(exp.paren(expr(a), copy=False) for a in args))
    if op == "OR":
        return exp.or_(*(exp.paren(expr(a), copy=False) for a in args))
    if op == "NOT":
        return exp.Not(this=exp.paren(expr(args[0]), copy=False))
    if op == "IS_NULL":  # an operation parenthesized: `(a = b) IS NULL` (NOT IN's null-aware condition)
        return exp.Is(this=_operand(expr(args[0])), expression=exp.Null())
    if op == "IS_NOT_NULL":
        return exp.Not(this=exp.Is(this=_operand(expr(args[0])), expression=exp.Null()))
    if op == "IN":
        return exp.In(this=expr(args[0]), expressions=[expr(a) for a in args[1:]])
    if op in _MATCHES:
        if args[1].form != "lit":
            raise SubplanError(f"{op} needs a literal pattern: {e!r}")
        pattern = _like_pattern(_MATCHES[op], str(args[1].value.value))
        like = exp.Like(this=expr(args[0]), expression=exp.Literal.string(pattern))
        return exp.Escape(this=like, expression=exp.Literal.string("\\"))
    if op == "LIKE":  # Spark's LIKE: '%', '_', and '\\' escaping them (SubtreeJson checks the pattern)
        if args[1].form != "lit" or args[1].value.type != "string":
            raise SubplanError(f"LIKE needs a literal pattern: {e!r}")
        like = exp.Like(this=expr(args[0]), expression=exp.Literal.string(str(args[1].value.value)))
        return exp.Escape(this=like, expression=exp.Literal.string("\\"))
    if op == "CASE_WHEN":
        case = exp.Case()
        pairs = len(args) // 2
        for i in range(pairs):
            case = case.when(expr(args[2 * i]), _typed(expr(args[2 * i + 1]), e.type), copy=False)
        if len(args) % 2:
            case = case.else_(_typed(expr(args[-1]), e.type), copy=False)
        return case
    if op == "COALESCE":
        return exp.Coalesce(this=expr(args[0]), expressions=[expr(a) for a in args[1:]])
    if op == "SUBSTRING":
        return exp.Substring(this=expr(args[0]), start=expr(args[1]), length=expr(args[2]) if len(args) > 2 else None)
    if op == "extract":
        return _typed(exp.Extract(this=exp.var(e.field), expression=expr(args[0])), "int")
    if op == "cast":
        return exp.Cast(this=expr(args[0]), to=sql_type(e.type))
    raise SubplanError(f"cannot render expression {e!r}")


def _operand(node: exp.Expression) -> exp.Expression:
    return node if isinstance(node, (exp.Column, exp.Literal, exp.Cast, exp.Paren)) else exp.paren(node, copy=False)


def aggregate(a: Aggregate) -> exp.Expression:
    if a.fn == "count_star":
        return exp.Count(this=exp.Star())
    if a.fn == "count_distinct":
        return exp.Count(this=exp.Distinct(expressions=[expr(a.input)]))
    if a.fn == "avg":
        return average(expr(a.input), a.input.type, a.type)
    fn = {"count": exp.Count, "sum": exp.Sum, "min": exp.Min, "max": exp.Max}[a.fn]
    return fn(this=expr(a.input))


# --- Spark's AVG of decimals: exact decimal division --------------------------------------------


def average(value: exp.Expression, value_type: str, result_type: str) -> exp.Expression:
    """Spark's AVG of `value` (a decimal(p, s)) as its Average evaluates it: `if (count = 0) null
    else sum / cast(count as decimal(20, 0))`, the sum exact (Spark's decimal(p + 10, s) holds
    it; every target sums decimals exactly) and the division `divide`'s, to `result_type`
    (decimal(p + 4, s + 4)). A zero count is `divide`'s zero divisor: NULL."""
    decimal = decimal_type(value_type)
    if decimal is None:
        raise SubplanError(f"a pushed AVG takes a decimal, not {value_type!r}")
    total = exp.Sum(this=value)
    count = exp.Count(this=value.copy())
    return divide(total, f"decimal(38,{decimal[1]})", count, "decimal(20,0)", result_type)


def divide(num: exp.Expression, num_type: str, den: exp.Expression, den_type: str, result_type: str) -> exp.Expression:
    """`num / den` for decimals (their Spark types given), as Spark's DecimalDivideWithOverflowCheck
    computes it: the exact quotient rounded HALF_UP (ties away from zero) to the result's scale s;
    NULL when den is 0. The one renderer of decimal division: a single table's or joined scan's
    pushed AVG (`average`) and a pushed tree's division (htap.rewrite.tree) both come here.

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
        raise SubplanError(f"a pushed division takes decimals: {num_type} / {den_type} -> {result_type}")
    scale = result[1]
    k = scale + right[1] - left[1]
    if k < 0:
        raise SubplanError(f"a pushed division to a scale below its dividend's is not rendered: {num_type} -> {result_type}")
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


def select(subplan: PushedSubplan, source: exp.Expression, all_columns: list[str]) -> exp.Select:
    """SELECT the subplan's output from `source` (a table or subquery holding current rows)."""
    if subplan.needs_no_column:
        raise SubplanError("a subplan that selects no column cannot be rendered: use subplan.carrying_rows(column)")
    if subplan.join is not None:
        raise SubplanError("a joined subplan is rendered by joined_select")
    if subplan.aggregating:
        outputs = _aggregate_outputs(subplan)
    else:
        outputs = [column(c) for c in (subplan.columns if subplan.columns is not None else all_columns)]
    q = exp.select(*outputs).from_(source)
    for f in subplan.filters:
        q = q.where(predicate(f), copy=False)
    for w in subplan.where:
        q = q.where(exp.paren(expr(w), copy=False), copy=False)
    return _top(q, subplan, named=False)


def joined_select(subplan: PushedSubplan, relations: list[exp.Expression]) -> exp.Select:
    """A joined scan: `relations[i]` holds the rows of `subplan.join.tables[i]` (its own filters and
    columns applied), aliased `table_alias(i)`; joined in order, then the outputs, grouping,
    ordering and limit above the join. Outputs are named c0, c1, ... (read by position)."""
    join = subplan.join
    if join is None or len(relations) != len(join.tables):
        raise SubplanError("joined_select needs a joined subplan and one relation per table")
    if subplan.aggregating:
        outputs = _aggregate_outputs(subplan, named=True)
    else:
        outputs = [expr(e).as_(f"c{i}", quoted=True) for i, e in enumerate(subplan.select)]
    if not outputs:
        raise SubplanError("a joined subplan selects no column")
    q = exp.select(*outputs).from_(relations[0])
    for step, relation in zip(join.steps, relations[1:]):
        q = q.join(relation, on=exp.paren(expr(step.on), copy=False), join_type=step.type, copy=False)
    return _top(q, subplan, named=True)


def table_relation(query: exp.Query, position: int) -> exp.Expression:
    """A table's rows (a query) as the relation of a joined scan at `position`."""
    return query.subquery(table_alias(position), copy=False)


def _aggregate_outputs(subplan: PushedSubplan, named: bool = False) -> list[exp.Expression]:
    outputs = [
        expr(g) if g.form == "col" and not named else expr(g).as_(f"group{i}", quoted=True)
        for i, g in enumerate(subplan.group_by)
    ]
    return outputs + [aggregate(a).as_(f"agg{i}", quoted=True) for i, a in enumerate(subplan.aggregates)]


def _top(q: exp.Select, subplan: PushedSubplan, named: bool) -> exp.Select:
    """GROUP BY, ORDER BY and LIMIT of the subplan onto `q`."""
    if subplan.group_by:
        q = q.group_by(*(expr(g) for g in subplan.group_by), copy=False)
    if subplan.order:
        q = q.order_by(*(_ordered(k, subplan, named) for k in subplan.order), copy=False)
    if subplan.limit is not None:
        q = q.limit(subplan.limit, copy=False)
    return q


def _output_name(subplan: PushedSubplan, position: int, named: bool) -> str:
    """The name an aggregating subplan's output at `position` has in the rendered SELECT."""
    groups = len(subplan.group_by)
    if position >= groups + len(subplan.aggregates) or position < 0:
        raise SubplanError(f"sort key names output {position}, which the subplan does not have")
    if position >= groups:
        return f"agg{position - groups}"
    g = subplan.group_by[position]
    return g.name if g.form == "col" and not named else f"group{position}"


def _ordered(k: SortKey, subplan: PushedSubplan, named: bool) -> exp.Ordered:
    """A sort key with Spark's direction and NULL placement spelled out (engines differ in
    defaults). An output is named, not numbered: a dialect may wrap the key in an expression
    (MySQL's NULL placement), where a number would be a constant."""
    if k.output is not None:
        target = exp.column(_output_name(subplan, k.output, named), quoted=True)
    else:
        target = expr(k.expr)
    return exp.Ordered(this=target, desc=not k.asc, nulls_first=k.nulls_first)
