"""Render a pushed subplan as SQL with sqlglot, for DuckDB (the replica) or a source dialect.

Built as sqlglot expressions, never by pasting strings, so quoting and dialect differences
(null-safe equality, LIKE escaping, timestamp literals) are sqlglot's job.
"""

from __future__ import annotations

import datetime as dt

from sqlglot import exp

from htap.rewrite.subplan import Aggregate, Literal, Predicate, PushedSubplan, SubplanError

_CMP = {"eq": exp.EQ, "eq_null_safe": exp.NullSafeEQ, "gt": exp.GT, "ge": exp.GTE, "lt": exp.LT, "le": exp.LTE}


def column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


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


def aggregate(a: Aggregate) -> exp.Expression:
    if a.fn == "count_star":
        return exp.Count(this=exp.Star())
    fn = {"count": exp.Count, "sum": exp.Sum, "min": exp.Min, "max": exp.Max}[a.fn]
    return fn(this=column(a.col))


def select(subplan: PushedSubplan, source: exp.Expression, all_columns: list[str]) -> exp.Select:
    """SELECT the subplan's output from `source` (a table or subquery holding current rows)."""
    if subplan.needs_no_column:
        raise SubplanError("a subplan that selects no column cannot be rendered: use subplan.carrying_rows(column)")
    if subplan.aggregating:
        outputs = [column(c) for c in subplan.group_by]
        outputs += [aggregate(a).as_(f"agg{i}", quoted=True) for i, a in enumerate(subplan.aggregates)]
    else:
        outputs = [column(c) for c in (subplan.columns if subplan.columns is not None else all_columns)]
    q = exp.select(*outputs).from_(source)
    for f in subplan.filters:
        q = q.where(predicate(f), copy=False)
    if subplan.group_by:
        q = q.group_by(*(column(c) for c in subplan.group_by), copy=False)
    return q
