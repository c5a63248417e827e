"""Source dialects: what a rendered plan needs so that a source answers what Spark would.

`htap.rewrite.render` builds one expression tree for every engine. A source dialect may lack a value
Spark's literals can hold or spell a literal with other semantics; `for_source` rewrites the tree
for it. String semantics (code-point order, no padding, case-sensitive equality) come from the
relation each source reads (see `QueryableSource.relation`), not from here.

MySQL/MariaDB:
- DOUBLE holds no NaN or infinity (`CAST('inf' AS DOUBLE)` is 0 with a warning), so a comparison
  with one is decided from Spark's order (NaN above everything, then +inf): `d < NaN` holds for
  every non-NULL `d`, `d = +inf` for none. Three-valued logic is kept: "always" is `d = d` and
  "never" is `d <> d` (both NULL for a NULL `d`); null-safe equality is plainly FALSE.
- A timestamp literal is its UTC wall time as DATETIME(6) (sessions run in UTC; MySQL's
  `TIMESTAMP('...+00:00')` and a bare DATETIME cast would drop the offset or the microseconds).

DuckDB (the replica): `REPLICA` is DuckDB's dialect spelling `NOT (x IS NULL)` as `x IS NOT NULL`.
sqlglot writes the former for both; DuckDB keeps it as a general filter, which it counts as keeping
a fifth of a table's rows, while `x IS NOT NULL` on a column is a table filter it does not count.
Spark puts `isnotnull(k)` on every join key, so each table of a pushed join looked a fifth of its
size, and DuckDB ordered TPC-H Q8's joins badly (1.7x slower than the same query with IS NOT NULL).

Floating point arithmetic (`computes_floats`): Postgres raises where a DOUBLE +, -, *, / or SUM
leaves DOUBLE's range (`value out of range: overflow`, and `underflow` for a nonzero product or
quotient that rounds to 0), MySQL/MariaDB where it overflows; Spark (IEEE) gives ±Infinity and 0.
No rewrite of the source's SQL gives IEEE's answer exactly (a double converts to NUMERIC with 15
digits, not its exact value), so a plan with such arithmetic is computed by DuckDB over the
source's rows instead (htap.pushdown.source_reader), as the replica computes it.

Integer arithmetic of exact decimal division (htap.rewrite.render `divide`, INT128 for DuckDB):
- Postgres: INT128 is NUMERIC (exact, unbounded); its DIV truncates toward zero, as `//` does.
- MySQL/MariaDB: INT128 is DECIMAL(65, 0); `a DIV b` converts to BIGINT, so the integer
  quotient is `(a - MOD(a, b)) / b`, a division with no remainder (exact at any scale; MOD of
  DECIMALs is exact).
"""

from __future__ import annotations

import os
import re

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from htap.rewrite.pushed import Expr, PlanError, PushedPlan

# Test switch, never set in use: `1` makes every `<` the replica's SQL holds a `<=`, a wrong
# pushdown that `htap verify replay` must catch (tests/test_verify_replay.py). In the replica's
# dialect, which every replica query is written in: it reaches every pushed path (a scan's
# filter, a join's condition, a whole subtree) on the replica route, and leaves the source
# route, which replay compares with, right.
BREAK_PUSHDOWN_ENV = "HTAP_TEST_BREAK_PUSHDOWN"


# Spark's ANSI division by zero, raised where the divisor is 0: a marker function of the divisor
# (htap.rewrite.render) that each dialect spells as a runtime error (MySQL has none: a plan
# dividing on MySQL is not pushed).
DIVIDE_BY_ZERO = "__HTAP_DIVIDE_BY_ZERO"
DIVIDE_BY_ZERO_MESSAGE = "[DIVIDE_BY_ZERO] Division by zero (spark-htap, as Spark's ANSI mode)"


# A SUM of decimals of more than 28 digits (htap.rewrite.render): Spark adds in unbounded
# BigDecimal and checks only the final value against its type (without grouping keys and over
# windows; a grouped sum's buffer holds 38 digits: docs/divergences.md); DuckDB adds unscaled values in a
# 128-bit integer, which a running sum of values near the bound leaves on its way (with signs that
# cancel, the final value fits). The replica adds the values below 10^24 unscaled as usual (fewer
# than 10^14 rows cannot leave 128 bits) and the rare larger ones exactly: their integer parts in
# two halves below 10^19 (as 128-bit integers), their fractions apart; the parts put together
# overflow exactly where Spark's final value does. Sources add NUMERIC (Postgres) or DECIMAL(65)
# (MySQL): a plain SUM.
WIDE_SUM = "__HTAP_WIDE_SUM"


def _wide_sum(value: exp.Expression, scale: int) -> exp.Expression:
    threshold = exp.Literal.number(10 ** max(0, 24 - scale))
    small = exp.Case().when(exp.LT(this=exp.Abs(this=value.copy()), expression=threshold), value.copy())
    big = exp.Case().when(exp.GTE(this=exp.Abs(this=value.copy()), expression=threshold.copy()), value.copy())
    whole = exp.Cast(this=exp.func("trunc", big), to=exp.DataType.build("HUGEINT"))
    unit = exp.Cast(this=exp.Literal.number(10**19), to=exp.DataType.build("HUGEINT"))
    high = exp.IntDiv(this=whole, expression=unit)
    low = exp.Sub(this=whole.copy(), expression=exp.Mul(this=exp.paren(high.copy(), copy=False), expression=unit.copy()))
    integer = exp.Add(this=exp.Mul(this=exp.Sum(this=high), expression=unit.copy()), expression=exp.Sum(this=low))
    large = exp.Cast(this=exp.paren(integer, copy=False), to=exp.DataType.build("DECIMAL(38, 0)"))
    if scale:
        fraction = exp.Sub(this=big.copy(), expression=exp.func("trunc", big.copy()))
        large = exp.Add(this=large, expression=exp.Sum(this=fraction))
    usual = exp.Sum(this=small)
    # NULL only when no value is (both parts NULL), as SUM
    return exp.Coalesce(this=exp.Add(this=usual, expression=exp.paren(large, copy=False)),
                        expressions=[usual.copy(), large.copy()])


class ReplicaDuckDB(DuckDB):
    """DuckDB, with `x IS NOT NULL` written as such (see the module's docstring)."""

    class Generator(DuckDB.Generator):
        def anonymous_sql(self, expression: exp.Anonymous) -> str:
            if expression.name == DIVIDE_BY_ZERO:
                return self.func("error", exp.Literal.string(DIVIDE_BY_ZERO_MESSAGE))
            if expression.name == WIDE_SUM:
                value, scale = expression.expressions
                return self.sql(exp.paren(_wide_sum(value, int(scale.name)), copy=False))
            return super().anonymous_sql(expression)

        def lt_sql(self, expression: exp.LT) -> str:
            if os.environ.get(BREAK_PUSHDOWN_ENV) == "1":
                return self.binary(expression, "<=")
            return super().lt_sql(expression)

        def not_sql(self, expression: exp.Not) -> str:
            inner = expression.this
            if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
                return f"{self.sql(inner, 'this')} IS NOT NULL"
            return super().not_sql(expression)


REPLICA = ReplicaDuckDB  # what replica reads render with: `.sql(dialects.REPLICA)`

_ORDER = {"nan": 2, "inf": 1, "-inf": -1}  # where a special double sits against every finite one
_HOLDS = {  # comparison -> sign of (column - literal) for which it holds, given literal position
    exp.EQ: lambda pos: False,
    exp.NEQ: lambda pos: True,
    exp.GT: lambda pos: pos < 0,
    exp.GTE: lambda pos: pos < 0,
    exp.LT: lambda pos: pos > 0,
    exp.LTE: lambda pos: pos > 0,
}


def _special_double(node: exp.Expression) -> str | None:
    """'nan', 'inf' or '-inf' when `node` is the renderer's spelling of that double literal."""
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DOUBLE) and isinstance(node.this, exp.Literal):
        text = node.this.name.lower()
        if node.this.is_string and text in _ORDER:
            return text
    return None


def _always(column: exp.Expression, holds: bool) -> exp.Expression:
    return (exp.EQ if holds else exp.NEQ)(this=column.copy(), expression=column.copy())


_FLIPPED = {exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.NullSafeEQ: exp.NullSafeEQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT,
            exp.LTE: exp.GTE}


def _mysql(node: exp.Expression) -> exp.Expression:
    if type(node) in _FLIPPED and _special_double(node.this) and not _special_double(node.expression):
        node = _FLIPPED[type(node)](this=node.expression, expression=node.this)  # `NaN > d` is `d < NaN`
    if isinstance(node, exp.NullSafeEQ) and _special_double(node.expression):
        return exp.false()
    if type(node) in _HOLDS and _special_double(node.expression):
        return exp.paren(_always(node.this, _HOLDS[type(node)](_ORDER[_special_double(node.expression)])), copy=False)
    if isinstance(node, exp.In) and any(_special_double(v) for v in node.expressions):
        kept = [v for v in node.expressions if not _special_double(v)]
        if not kept:
            return exp.paren(_always(node.this, False), copy=False)
        return exp.In(this=node.this, expressions=kept)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        if node.to.is_type(exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMP):
            wall = node.this.name.removesuffix("+00:00")
            return exp.Cast(this=exp.Literal.string(wall), to=exp.DataType.build("DATETIME(6)", dialect="mysql"))
    return node


_INTEGERS = {"postgres": "DECIMAL", "mysql": "DECIMAL(65, 0)"}  # what INT128 is spelled as


def _integers(query: exp.Expression, dialect: str) -> exp.Expression:
    """INT128 casts as the dialect's exact integer type, then MySQL's integer division spelled out."""
    integer = exp.DataType.build(_INTEGERS[dialect], dialect=dialect)

    def cast(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.INT128):
            return exp.Cast(this=node.this, to=integer.copy())
        return node

    query = query.transform(cast)
    if dialect == "mysql":  # innermost first: a spelled-out division copies its operands
        for node in sorted(query.find_all(exp.IntDiv), key=lambda n: -n.depth):
            a, b = node.this, node.expression
            remainder = exp.Mod(this=a.copy(), expression=b.copy())
            exact = exp.Sub(this=exp.paren(a.copy(), copy=False), expression=exp.paren(remainder, copy=False))
            node.replace(exp.paren(exp.Div(this=exp.paren(exact, copy=False), expression=exp.paren(b.copy(), copy=False)),
                                   copy=False))
    return query


def _divide_by_zero(query: exp.Expression, dialect: str) -> exp.Expression:
    """The ANSI division-by-zero marker as the dialect's runtime error: Postgres raises on
    `1 / (0 * divisor)` (not a constant: evaluated only where the divisor is 0)."""
    if dialect != "postgres":
        raise PlanError(f"{dialect} divides by zero without an error (Spark's ANSI mode raises): not pushed")

    def spell(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name == DIVIDE_BY_ZERO:
            zero = exp.Mul(this=exp.Literal.number(0), expression=exp.paren(node.expressions[0].copy(), copy=False))
            return exp.paren(exp.Div(this=exp.Literal.number(1), expression=exp.paren(zero, copy=False), typed=False,
                                     safe=False), copy=False)
        return node

    return query.transform(spell)


_FLOAT_ARITHMETIC = ("+", "-", "*", "/", "DIV")  # DIV: ANSI division (raises on a zero divisor)


def computes_floats(e: Expr) -> bool:
    """Whether `e` (at any depth, not inside a subquery) adds, subtracts, multiplies, divides or
    sums DOUBLEs (or FLOATs): what a source may refuse where Spark gives ±Infinity or 0 (see the module)."""
    if (e.form == "op" and e.name in _FLOAT_ARITHMETIC or e.form == "agg" and e.name == "sum") and e.type in ("double", "float"):
        return True
    return any(computes_floats(a) for a in (*e.args, *e.partition_by, *(k.expr for k in e.order_by)))


def plan_computes_floats(plan: PushedPlan) -> bool:
    """Whether any expression of the plan, its scans' filters and its subqueries included,
    `computes_floats`."""
    if any(computes_floats(c) for scan in plan.scans for c in scan.filter):
        return True
    return any(computes_floats(e) for node in plan.root.walk() for e in node.expressions())


def _check_full_join(join: exp.Join, dialect: str) -> None:
    """Postgres runs a FULL JOIN only with a merge- or hash-joinable condition (an equality of the
    two sides' columns among its ANDed conjuncts): otherwise a PlanError. (MySQL's text spells a
    FULL JOIN out as a UNION ALL: sqlglot's MySQL generator.)"""
    on = join.args.get("on")
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    parts = [p.unnest() if isinstance(p, exp.Paren) else p for p in parts]
    if dialect == "postgres" and not any(
        isinstance(p, exp.EQ) and isinstance(p.this, exp.Column) and isinstance(p.expression, exp.Column)
        and p.this.table != p.expression.table for p in parts
    ):
        raise PlanError("Postgres runs a FULL JOIN only on an equality of the two sides' columns: not pushed")


def _check_year(cast: exp.Cast, dialect: str) -> None:
    """A date or timestamp literal outside years 1..9999 is a PlanError for a source: Spark's
    calendar has a year 0 and negative years (ADD_MONTHS(DATE '0001-01-01', -12) is 0000-01-01),
    Postgres spells them BC and rejects year 0, MySQL/MariaDB hold none (fuzz seed 22 query 1619).
    DuckDB, the replica's engine, reads them as Spark does."""
    if not (isinstance(cast.this, exp.Literal) and cast.this.is_string):
        return
    if not any(cast.to.is_type(t) for t in ("date", "timestamp", "timestamptz")):
        return
    m = re.match(r"\s*([+-]?)(\d+)-", cast.this.name)
    if m and (m.group(1) == "-" or not 1 <= int(m.group(2)) <= 9999):
        raise PlanError(f"{dialect} holds no date or timestamp outside years 1..9999 as Spark does: "
                        f"{cast.sql(dialect)!r} is not answered by the source")


_TRANSFORMS = {"mysql": _mysql}


def for_source(query: exp.Expression, dialect: str) -> exp.Expression:
    """`query` (from htap.rewrite.render) rewritten for a source dialect (a copy). A value the
    dialect cannot hold where no rewrite decides it (a NaN inside arithmetic, for MySQL) is a
    PlanError: the shim's planning check then leaves that part of the query to Spark."""
    if dialect in _INTEGERS and any(True for _ in query.find_all(exp.IntDiv)):
        query = _integers(query, dialect)
    if any(n.name == DIVIDE_BY_ZERO for n in query.find_all(exp.Anonymous)):
        query = _divide_by_zero(query, dialect)
    for join in query.find_all(exp.Join):
        if join.side == "FULL":
            _check_full_join(join, dialect)
    for cast in query.find_all(exp.Cast):
        _check_year(cast, dialect)
    if any(n.name == WIDE_SUM for n in query.find_all(exp.Anonymous)):
        query = query.transform(lambda n: exp.Sum(this=n.expressions[0].copy())
                                if isinstance(n, exp.Anonymous) and n.name == WIDE_SUM else n)
    transform = _TRANSFORMS.get(dialect)
    if transform is None:
        return query
    query = query.transform(transform)
    if dialect == "mysql":
        left = next((n for n in query.find_all(exp.Cast) if _special_double(n)), None)
        if left is not None:
            raise PlanError(f"MySQL/MariaDB holds no {_special_double(left)} double: {left.parent.sql('mysql')!r} cannot be"
                            " answered by the source")
    return query
