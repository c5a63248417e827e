"""Random Spark SQL queries over a schema, deterministic from (seed, index).

A query is generated once as a template in which every table is written `zz_<name>_zz`; each run
(replica route, source route, oracle) substitutes its own table names, so the three runs differ in
nothing else (`Query.text`).

What the grammar keeps in mind so that the one right answer is determined:
- LIMIT (and OFFSET) only under an ORDER BY of every output column (then the rows chosen are a
  determined multiset; the top-level order is compared row by row);
- window functions whose value depends on the order among peers (row_number, lag, lead, ROWS
  frames) order by every column in scope after their own keys: rows tied on all of them are
  identical, so any order among them gives the same output multiset; and a SELECT has at most
  one of them (two would pair their values over identical rows arbitrarily: ROW_NUMBER 1 and 2
  with LAG values p and x, or with x and p; fuzz seed 24 query 1908);
- scalar subqueries are aggregates (one row);
- no function whose result depends on row order (first, collect_list) or on the clock.
ANSI mode is on: overflow and division by zero raise. Arithmetic avoids the `wide` columns (the
ones holding extreme values) most of the time and divides by NULLIF(x, 0) mostly, so that most
queries return rows; some raise, and then all three runs must raise.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal

from fuzz.schema import (
    BOOL,
    DATE,
    DATES,
    DEC,
    DOUBLE_SPECIALS,
    DYADIC,
    FLOAT,
    FLOAT_SPECIALS,
    INT,
    STR,
    STRINGS,
    TS,
    TSNTZ,
    Column,
    Schema,
    SqlType,
    value,
)

TABLE_MARK = re.compile(r"\bzz_(\w+?)_zz\b")

DEFAULT = {
    INT: SqlType("int"), DEC: SqlType("decimal", 12, 2), FLOAT: SqlType("double"), STR: SqlType("text"),
    BOOL: SqlType("bool"), DATE: SqlType("date"), TS: SqlType("timestamp"), TSNTZ: SqlType("timestamp_ntz"),
}
ORDERABLE = (INT, DEC, FLOAT, STR, BOOL, DATE, TS, TSNTZ)


@dataclass(frozen=True)
class Query:
    """One generated query: its template text, whether its top-level ORDER BY is a total order
    (compare in order), and a short description of its shape (for the statistics)."""

    seed: int
    index: int
    template: str
    ordered: bool
    shape: str

    def text(self, refs: dict[str, str]) -> str:
        """The query with each table `zz_<t>_zz` replaced by `refs[t]`."""
        return TABLE_MARK.sub(lambda m: refs[m.group(1)], self.template)


@dataclass(frozen=True)
class Ref:
    """A column in scope: `qual.name`."""

    qual: str
    name: str
    type: SqlType
    wide: bool = False

    @property
    def sql(self) -> str:
        return f"{self.qual}.{self.name}"


@dataclass(frozen=True)
class E:
    """An expression and its (approximate: family and, for columns, exact) type."""

    sql: str
    type: SqlType
    wide: bool = False

    @property
    def family(self) -> str:
        return self.type.family


@dataclass
class Sel:
    """A generated SELECT (or set operation): its text and its output columns c0..cn."""

    sql: str
    columns: list[E]
    ordered: bool = False
    shape: list[str] = field(default_factory=list)


def lit_str(s: str) -> str:
    """A Spark string literal (backslash escapes are on: `\\` is one backslash)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Gen:
    """The generator of one query (fresh per (seed, index))."""

    def __init__(self, schema: Schema, rng: random.Random):
        self.schema = schema
        self.rng = rng
        self.n_alias = 0
        self.ctes: list[tuple[str, list[E]]] = []
        self.cte_sql: list[str] = []
        self.shape: set[str] = set()

    # --- helpers ----------------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options, weights=None):
        return self.rng.choices(options, weights=weights)[0] if weights else self.rng.choice(options)

    def alias(self, prefix: str = "a") -> str:
        self.n_alias += 1
        return f"{prefix}{self.n_alias}"

    # --- literals -----------------------------------------------------------------------------------

    def literal(self, t: SqlType, edge: bool = True) -> str:
        """A literal of type `t`, drawn from the same pools as the data (so it matches rows), at
        the type's edges sometimes."""
        rng = self.rng
        fam = t.family
        if fam == INT:
            if edge and self.chance(0.08) and t.kind in ("smallint", "int", "bigint"):
                lo, hi = t.int_range
                v = self.pick([lo, hi, 0, -1])
                if v == lo:
                    return f"CAST('{v}' AS {t.spark})"
                return str(v)
            return str(rng.randint(-5, 20))
        if fam == DEC:
            tt = t if t.kind == "decimal" else DEFAULT[DEC]
            for _ in range(5):
                v = value(Column("x", tt, wide=edge and self.chance(0.3)), rng)
                if isinstance(v, Decimal):
                    break
            else:
                v = Decimal("1.5")
            text = format(v, "f")
            if self.chance(0.15):
                return f"CAST('{text}' AS {tt.spark})"
            return text
        if fam == FLOAT:
            if t.kind == "float":
                v = self.pick(FLOAT_SPECIALS) if edge and self.chance(0.2) else self.pick(DYADIC)
            else:
                v = self.pick(DOUBLE_SPECIALS) if edge and self.chance(0.25) else self.pick(DYADIC)
            return self.float_literal(v, "FLOAT" if t.kind == "float" and self.chance(0.6) else "DOUBLE")
        if fam == STR:
            s = self.pick(STRINGS)
            return lit_str(s)
        if fam == BOOL:
            return self.pick(["TRUE", "FALSE"])
        if fam == DATE:
            return f"DATE '{self.pick_date().isoformat()}'"
        if fam in (TS, TSNTZ):
            d = dt.datetime.combine(self.pick_date(), self.pick([dt.time(0), dt.time(12, 30, 0, 500000),
                                                               dt.time(23, 59, 59, 999999), dt.time(1, 2, 3)]))
            word = "TIMESTAMP" if fam == TS else "TIMESTAMP_NTZ"
            return f"{word} '{d.isoformat(sep=' ')}'"
        raise AssertionError(fam)

    def pick_date(self) -> dt.date:
        return self.pick(DATES)

    def float_literal(self, v: float, typ: str) -> str:
        if v != v or v in (float("inf"), float("-inf")) or (v == 0 and str(v).startswith("-")) or typ == "FLOAT":
            text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(str(v), repr(v))
            return f"CAST('{text}' AS {typ})"
        r = repr(v)
        return r if "e" in r else r + "E0"

    def null(self, t: SqlType) -> str:
        return f"CAST(NULL AS {self.spark_type(t)})"

    @staticmethod
    def spark_type(t: SqlType) -> str:
        if t.kind == "char":
            return "STRING"
        return t.spark

    # --- expressions --------------------------------------------------------------------------------

    def column(self, scope: list[Ref], fam: str | None = None, narrow: bool = False) -> Ref | None:
        cands = [r for r in scope if (fam is None or r.type.family == fam) and not (narrow and r.wide)]
        if narrow and not cands:
            cands = [r for r in scope if fam is None or r.type.family == fam]
        return self.pick(cands) if cands else None

    def expr(self, scope: list[Ref], fam: str | None = None, depth: int = 2) -> E:
        """An expression of family `fam` (any when None) over `scope`."""
        if fam is None:
            fam = self.pick([r.type.family for r in scope]) if scope and self.chance(0.8) else self.pick(ORDERABLE)
        if depth <= 0 or self.chance(0.45):
            c = self.column(scope, fam)
            if c is not None and self.chance(0.92):
                return E(c.sql, c.type, c.wide)
            return E(self.literal(DEFAULT[fam]) if self.chance(0.85) else self.null(DEFAULT[fam]), DEFAULT[fam])
        maker = {INT: self.int_expr, DEC: self.dec_expr, FLOAT: self.float_expr, STR: self.str_expr,
                 BOOL: self.bool_expr, DATE: self.date_expr, TS: self.ts_expr, TSNTZ: self.ts_expr}[fam]
        if self.chance(0.18):
            return self.generic_expr(scope, fam, depth)
        return maker(scope, fam, depth - 1)

    def narrow(self, scope: list[Ref], fam: str, depth: int) -> E:
        """An operand for arithmetic: a column without extreme values when there is one."""
        if self.chance(0.9):
            c = self.column(scope, fam, narrow=True)
            if c is not None and (not c.wide or self.chance(0.15)):
                return E(c.sql, c.type, c.wide)
        return self.expr(scope, fam, depth)

    def generic_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        """CASE WHEN, COALESCE, NULLIF, IF, greatest/least: any family."""
        d = depth - 1
        a = self.expr(scope, fam, d)
        b = self.expr(scope, fam, d)
        kind = self.pick(["case", "coalesce", "nullif", "if", "greatest"] if fam in ORDERABLE else ["case", "coalesce"])
        t = a.type if a.type.family == fam else DEFAULT[fam]
        if kind == "case":
            p = self.pred(scope, d, subqueries=False)
            if self.chance(0.5):
                return E(f"CASE WHEN {p} THEN {a.sql} ELSE {b.sql} END", t)
            return E(f"CASE WHEN {p} THEN {a.sql} END", t)
        if kind == "coalesce":
            return E(f"COALESCE({a.sql}, {b.sql})", t)
        if kind == "nullif":
            return E(f"NULLIF({a.sql}, {b.sql})", t)
        if kind == "if":
            return E(f"IF({self.pred(scope, d, subqueries=False)}, {a.sql}, {b.sql})", t)
        return E(f"{self.pick(['greatest', 'least'])}({a.sql}, {b.sql})", t)

    def int_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        k = self.pick(["arith", "abs", "length", "datepart", "datediff", "cast", "div", "mod", "neg"],
                      [6, 1, 2, 2, 1, 1, 1, 1, 1])
        if k == "arith":
            a, b = self.narrow(scope, INT, depth), self.narrow(scope, INT, depth)
            op = self.pick(["+", "-", "*"])
            t = SqlType("bigint") if "bigint" in (a.type.kind, b.type.kind) else (
                SqlType("int") if "int" in (a.type.kind, b.type.kind) or a.type.kind != b.type.kind else a.type)
            return E(f"({a.sql} {op} {b.sql})", t, a.wide or b.wide)
        if k == "abs":
            a = self.narrow(scope, INT, depth)
            return E(f"abs({a.sql})", a.type, a.wide)
        if k == "neg":
            a = self.narrow(scope, INT, depth)
            return E(f"(- {a.sql})", a.type, a.wide)
        if k == "length":
            return E(f"{self.pick(['length', 'char_length'])}({self.expr(scope, STR, depth).sql})", SqlType("int"))
        if k == "datepart":
            fam2 = self.pick([DATE, TSNTZ, TS])
            fn = self.pick(["year", "month", "dayofmonth", "quarter", "dayofweek"] + (["hour"] if fam2 != DATE else []))
            return E(f"{fn}({self.expr(scope, fam2, depth).sql})", SqlType("int"))
        if k == "datediff":
            d1, d2 = self.expr(scope, DATE, depth), self.expr(scope, DATE, depth)
            return E(f"datediff({d1.sql}, {d2.sql})", SqlType("int"))
        if k == "cast":
            src = self.pick([DEC, FLOAT, STR])
            a = self.expr(scope, src, depth)
            if src == STR:
                return E(f"try_cast({a.sql} AS INT)", SqlType("int"))
            return E(f"CAST({a.sql} AS {self.pick(['INT', 'BIGINT'])})", SqlType("bigint"), True)
        a, b = self.narrow(scope, INT, depth), self.narrow(scope, INT, depth)
        divisor = f"NULLIF({b.sql}, 0)" if self.chance(0.85) else b.sql
        if k == "div":
            return E(f"({a.sql} DIV {divisor})", SqlType("bigint"))
        return E(f"({a.sql} % {divisor})", a.type)

    def dec_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        k = self.pick(["arith", "mul", "div", "round", "abs", "cast", "neg"], [5, 2, 2, 2, 1, 2, 1])
        if k in ("arith", "mul"):
            a = self.narrow(scope, DEC, depth)
            b = self.narrow(scope, self.pick([DEC, INT]), depth)
            op = "*" if k == "mul" else self.pick(["+", "-"])
            if self.chance(0.5):
                a, b = b, a
            return E(f"({a.sql} {op} {b.sql})", DEFAULT[DEC], a.wide or b.wide)
        if k == "div":
            a = self.narrow(scope, self.pick([DEC, INT]), depth)
            b = self.narrow(scope, DEC, depth)
            divisor = f"NULLIF({b.sql}, 0)" if self.chance(0.85) else b.sql
            return E(f"({a.sql} / {divisor})", DEFAULT[DEC])
        if k == "round":
            a = self.expr(scope, DEC, depth)
            fn, places = self.pick(["round", "round", "bround"]), self.rng.randint(-1, 3)
            return E(f"{fn}({a.sql}, {places})", DEFAULT[DEC], a.wide)
        if k == "abs":
            a = self.expr(scope, DEC, depth)
            return E(f"abs({a.sql})", a.type, a.wide)
        if k == "neg":
            a = self.expr(scope, DEC, depth)
            return E(f"(- {a.sql})", a.type, a.wide)
        src = self.pick([INT, DEC, FLOAT])
        a = self.expr(scope, src, depth)
        p = self.pick([5, 10, 18, 38])
        s = self.rng.randint(0, min(p, 6))
        return E(f"CAST({a.sql} AS DECIMAL({p},{s}))", SqlType("decimal", p, s), True)

    def float_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        k = self.pick(["arith", "div", "round", "abs", "cast", "sqrt"], [5, 2, 1, 1, 2, 1])
        if k == "arith":
            a = self.narrow(scope, FLOAT, depth)
            b = self.narrow(scope, self.pick([FLOAT, INT, FLOAT]), depth)
            if self.chance(0.5):
                a, b = b, a
            return E(f"({a.sql} {self.pick(['+', '-', '*'])} {b.sql})", SqlType("double"))
        if k == "div":
            a = self.narrow(scope, self.pick([FLOAT, INT]), depth)
            b = self.narrow(scope, self.pick([FLOAT, INT]), depth)
            divisor = f"NULLIF({b.sql}, 0)" if self.chance(0.85) else b.sql
            return E(f"({a.sql} / {divisor})", SqlType("double"))
        if k == "round":
            return E(f"round({self.expr(scope, FLOAT, depth).sql}, {self.rng.randint(0, 2)})", SqlType("double"))
        if k == "abs":
            a = self.expr(scope, FLOAT, depth)
            return E(f"abs({a.sql})", a.type)
        if k == "sqrt":
            return E(f"sqrt(abs({self.expr(scope, FLOAT, depth).sql}))", SqlType("double"))
        a = self.expr(scope, self.pick([INT, DEC]), depth)
        return E(f"CAST({a.sql} AS {self.pick(['DOUBLE', 'FLOAT'])})", SqlType("double"))

    def str_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        k = self.pick(["case", "substr", "concat", "trim", "replace", "cast", "pad", "left"], [3, 3, 2, 2, 1, 2, 1, 1])
        a = self.expr(scope, STR, depth)
        t = SqlType("text")
        if k == "case":
            return E(f"{self.pick(['upper', 'lower', 'initcap'])}({a.sql})", t)
        if k == "substr":
            pos = self.pick([1, 1, 2, 0, -2, 3])
            if self.chance(0.7):
                return E(f"substring({a.sql}, {pos}, {self.rng.randint(0, 4)})", t)
            return E(f"substring({a.sql}, {pos})", t)
        if k == "concat":
            b = self.expr(scope, STR, depth) if self.chance(0.7) else E(self.literal(t), t)
            return E(f"concat({a.sql}, {b.sql})", t)
        if k == "trim":
            return E(f"{self.pick(['trim', 'ltrim', 'rtrim'])}({a.sql})", t)
        if k == "replace":
            old, new = lit_str(self.pick(["a", " ", "ß", "%"])), lit_str(self.pick(["", "x", "SS"]))
            return E(f"replace({a.sql}, {old}, {new})", t)
        if k == "pad":
            return E(f"{self.pick(['lpad', 'rpad'])}({a.sql}, {self.rng.randint(0, 5)}, '*')", t)
        if k == "left":
            return E(f"{self.pick(['left', 'right'])}({a.sql}, {self.rng.randint(0, 3)})", t)
        src = self.pick([INT, DEC, DATE, BOOL, FLOAT])
        return E(f"CAST({self.expr(scope, src, depth).sql} AS STRING)", t)

    def bool_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        return E(f"({self.pred(scope, depth, subqueries=False)})", SqlType("bool"))

    def date_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        k = self.pick(["add", "cast", "months", "trunc"], [3, 2, 1, 1])
        t = SqlType("date")
        if k == "add":
            a = self.expr(scope, DATE, depth)
            if self.chance(0.3):
                n = self.narrow(scope, INT, depth)
            else:
                n = E(str(self.rng.randint(-400, 400)), SqlType("int"))
            if n.type.kind not in ("int", "smallint"):  # date_add takes INT; ANSI refuses BIGINT -> INT
                n = E(f"CAST({n.sql} AS INT)", SqlType("int"))
            return E(f"{self.pick(['date_add', 'date_sub'])}({a.sql}, {n.sql})", t)
        if k == "cast":
            return E(f"CAST({self.expr(scope, self.pick([TS, TSNTZ]), depth).sql} AS DATE)", t)
        if k == "months":
            return E(f"add_months({self.expr(scope, DATE, depth).sql}, {self.rng.randint(-13, 13)})", t)
        return E(f"last_day({self.expr(scope, DATE, depth).sql})", t)

    def ts_expr(self, scope: list[Ref], fam: str, depth: int) -> E:
        t = DEFAULT[fam]
        if self.chance(0.5):
            target = "TIMESTAMP" if fam == TS else "TIMESTAMP_NTZ"
            return E(f"CAST({self.expr(scope, DATE, depth).sql} AS {target})", t)
        unit = self.pick(["'DAY'", "'HOUR'", "'MONTH'", "'YEAR'"])
        return E(f"date_trunc({unit}, {self.expr(scope, fam, depth).sql})", t)

    # --- predicates ---------------------------------------------------------------------------------

    def pred(self, scope: list[Ref], depth: int, subqueries: bool = True, outer: list[Ref] | None = None) -> str:
        """A boolean condition over `scope` (and, inside a subquery, its outer scope `outer`)."""
        kinds = ["cmp", "in", "between", "null", "like", "bool", "and", "or", "not"]
        weights = [8, 2, 1, 2, 2, 1, 3, 2, 1]
        if subqueries and depth > 0:
            kinds += ["exists", "insub", "scalar"]
            weights += [2, 2, 1]
        if depth <= 0:
            kinds, weights = kinds[:6], weights[:6]
        k = self.pick(kinds, weights)
        d = depth - 1
        if k in ("and", "or"):
            return f"({self.pred(scope, d, subqueries, outer)} {k.upper()} {self.pred(scope, d, subqueries, outer)})"
        if k == "not":
            return f"(NOT {self.pred(scope, d, subqueries, outer)})"
        if k == "exists":
            return self.exists(scope, d)
        if k == "insub":
            return self.in_subquery(scope, d)
        if k == "scalar":
            return self.scalar_cmp(scope, d)
        return self.simple_pred(scope, k, max(d, 0))

    def simple_pred(self, scope: list[Ref], k: str, depth: int) -> str:
        if k == "like":
            s = self.expr(scope, STR, depth if self.chance(0.3) else 0)
            return self.like(s.sql)
        if k == "bool":
            b = self.column(scope, BOOL)
            if b is None:
                k = "cmp"
            else:
                return self.pick([b.sql, f"(NOT {b.sql})", f"({b.sql} = {self.pick(['TRUE', 'FALSE'])})",
                                  f"({b.sql} IS NOT TRUE)"])
        fam = self.pick([r.type.family for r in scope]) if scope and self.chance(0.95) else None
        a = self.expr(scope, fam, depth if self.chance(0.35) else 0)
        fam = a.family
        if k == "null":
            return f"({a.sql} IS {self.pick(['', 'NOT '])}NULL)"
        if k == "in":
            items = [self.literal(a.type) for _ in range(self.rng.randint(1, 5))]
            if self.chance(0.2):
                items.append("NULL")
            return f"({a.sql} {self.pick(['', '', 'NOT '])}IN ({', '.join(items)}))"
        if k == "between" and fam != BOOL:
            lo, hi = self.literal(a.type), self.literal(a.type)
            return f"({a.sql} {self.pick(['', '', 'NOT '])}BETWEEN {lo} AND {hi})"
        op = self.pick(["=", "<>", "<", "<=", ">", ">=", "<=>", "!="])
        if self.chance(0.7):
            b = self.literal(a.type)
        else:
            b = self.expr(scope, fam, depth).sql
        if self.chance(0.2):
            a_sql, b_sql = b, a.sql
        else:
            a_sql, b_sql = a.sql, b
        return f"({a_sql} {op} {b_sql})"

    def like(self, s: str) -> str:
        """LIKE with %, _ and escapes; startswith / endswith / contains; ILIKE."""
        base = self.pick(STRINGS)
        k = self.pick(["like", "like", "escape", "starts", "ilike"])
        if k == "starts":
            fn = self.pick(["startswith", "endswith", "contains"])
            return f"{fn}({s}, {lit_str(base[:2])})"
        if k == "escape":
            body = base.replace("!", "!!").replace("%", "!%").replace("_", "!_")
            pat = self.pick([f"{body}%", f"%{body}", f"%{body}%", body])
            return f"({s} {self.pick(['', 'NOT '])}LIKE {lit_str(pat)} ESCAPE '!')"
        body = base.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") if self.chance(0.6) else base
        if body and self.chance(0.3):
            i = self.rng.randrange(len(body))
            if body[i] != "\\" and (i == 0 or body[i - 1] != "\\"):
                body = body[:i] + "_" + body[i + 1:]
        pat = self.pick([f"{body}%", f"%{body}", f"%{body}%", body, "%", "_", "__%", f"{body}_"])
        word = "ILIKE" if k == "ilike" else "LIKE"
        return f"({s} {self.pick(['', '', 'NOT '])}{word} {lit_str(pat)})"

    def correlation(self, inner: list[Ref], outer: list[Ref]) -> str | None:
        """`inner.x = outer.y` on columns of one family (or a non-equality sometimes)."""
        pairs = [(i, o) for i in inner for o in outer if i.type.family == o.type.family and i.type.family != BOOL]
        if not pairs:
            return None
        ks = [(i, o) for i, o in pairs if i.name in ("k", "id") or o.name in ("k", "id")]
        i, o = self.pick(ks) if ks and self.chance(0.7) else self.pick(pairs)
        op = "=" if self.chance(0.85) else self.pick(["<", ">", "<>"])
        return f"{i.sql} {op} {o.sql}"

    def sub_from(self, depth: int) -> tuple[str, list[Ref]]:
        """A subquery's FROM: mostly one table, sometimes a join."""
        if depth > 0 and self.chance(0.2):
            return self.from_clause(depth, max_rels=2)
        return self.base_relation()

    def exists(self, scope: list[Ref], depth: int) -> str:
        self.shape.add("exists")
        frm, inner = self.sub_from(depth)
        conds = []
        if self.chance(0.8):
            c = self.correlation(inner, scope)
            if c:
                conds.append(c)
                self.shape.add("correlated")
        if self.chance(0.5) or not conds:
            conds.append(self.pred(inner, depth, subqueries=depth > 0))
        where = " AND ".join(conds)
        return f"({self.pick(['', '', 'NOT '])}EXISTS (SELECT 1 FROM {frm} WHERE {where}))"

    def in_subquery(self, scope: list[Ref], depth: int) -> str:
        self.shape.add("in-subquery")
        frm, inner = self.sub_from(depth)
        fams = {r.type.family for r in inner} & {r.type.family for r in scope} - {BOOL}
        if not fams:
            return self.simple_pred(scope, "cmp", 0)
        fam = self.pick(sorted(fams))
        a = self.expr(scope, fam, 0 if self.chance(0.8) else 1)
        b = self.expr(inner, fam, 0 if self.chance(0.8) else 1)
        if self.chance(0.15):  # (a, a2) IN (SELECT b, b2 ...)
            fam2 = self.pick(sorted(fams))
            a2, b2 = self.expr(scope, fam2, 0), self.expr(inner, fam2, 0)
            a = E(f"({a.sql}, {a2.sql})", a.type)
            b = E(f"{b.sql}, {b2.sql}", b.type)
        conds = []
        if self.chance(0.3):
            c = self.correlation(inner, scope)
            if c:
                conds.append(c)
                self.shape.add("correlated")
        if self.chance(0.5):
            conds.append(self.pred(inner, depth, subqueries=depth > 0))
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        distinct = "DISTINCT " if self.chance(0.2) else ""
        return f"({a.sql} {self.pick(['', 'NOT '])}IN (SELECT {distinct}{b.sql} FROM {frm}{where}))"

    def scalar_subquery(self, scope: list[Ref], depth: int, fam: str | None = None) -> E | None:
        """(SELECT agg(...) FROM ... [WHERE inner.x = outer.y AND ...]): one row."""
        self.shape.add("scalar-subquery")
        frm, inner = self.base_relation()
        agg = self.aggregate(inner, fam)
        if agg is None:
            return None
        conds = []
        if scope and self.chance(0.6):
            pairs = [(i, o) for i in inner for o in scope if i.type.family == o.type.family and i.type.family != BOOL]
            if pairs:
                i, o = self.pick(pairs)
                conds.append(f"{i.sql} = {o.sql}")
                self.shape.add("correlated")
        if self.chance(0.4):
            conds.append(self.pred(inner, depth, subqueries=False))
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        return E(f"(SELECT {agg.sql} FROM {frm}{where})", agg.type)

    def scalar_cmp(self, scope: list[Ref], depth: int) -> str:
        a = self.expr(scope, self.pick([INT, DEC, FLOAT, STR, DATE]), 0)
        sub = self.scalar_subquery(scope, depth, a.family)
        if sub is None:
            return self.simple_pred(scope, "cmp", 0)
        return f"({a.sql} {self.pick(['=', '<', '>', '<=', '>=', '<>'])} {sub.sql})"

    # --- aggregates -----------------------------------------------------------------------------------

    def aggregate(self, scope: list[Ref], fam: str | None = None) -> E | None:
        """count(*), count(x), count(DISTINCT x), sum, avg, min, max, over columns or expressions.
        `fam`: the family the result must have (None: any)."""
        options = []
        if fam in (None, INT):
            options += ["count_star", "count", "count_distinct", "sum_int"]
        if fam in (None, DEC, INT, FLOAT):
            options += ["sum", "avg", "sum", "minmax"]
        if fam is not None and fam not in (INT, DEC, FLOAT):
            options += ["minmax"]
        if fam is None:
            options += ["minmax", "minmax"]
        k = self.pick(options)
        arg_depth = 1 if self.chance(0.25) else 0
        if k == "count_star":
            return E("count(*)", SqlType("bigint"))
        if k in ("count", "count_distinct"):
            a = self.expr(scope, None, arg_depth)
            d = "DISTINCT " if k == "count_distinct" else ""
            return E(f"count({d}{a.sql})", SqlType("bigint"))
        if k == "minmax":
            target = fam or self.pick([r.type.family for r in scope] or [INT])
            a = self.expr(scope, target, arg_depth)
            return E(f"{self.pick(['min', 'max'])}({a.sql})", a.type)
        src = {INT: INT, DEC: DEC, FLOAT: FLOAT}.get(fam) if fam else None
        if k == "sum_int":
            src = INT
        src = src or self.pick([INT, DEC, DEC, FLOAT])
        if k == "avg" and fam == INT:
            k = "sum"
        a = self.narrow(scope, src, arg_depth) if self.chance(0.7) else self.expr(scope, src, arg_depth)
        d = "DISTINCT " if self.chance(0.1) else ""
        if k == "avg":
            return E(f"avg({d}{a.sql})", SqlType("double") if src in (INT, FLOAT) else DEFAULT[DEC])
        t = {INT: SqlType("bigint"), FLOAT: SqlType("double")}.get(src, DEFAULT[DEC])
        return E(f"sum({d}{a.sql})", t, a.wide)

    # --- FROM ----------------------------------------------------------------------------------------

    def base_relation(self) -> tuple[str, list[Ref]]:
        if self.ctes and self.chance(0.3):
            name, cols = self.pick(self.ctes)
            a = self.alias()
            return f"{name} AS {a}", [Ref(a, f"c{i}", c.type, c.wide) for i, c in enumerate(cols)]
        t = self.pick(list(self.schema.tables))
        a = self.alias()
        return f"zz_{t.name}_zz AS {a}", [Ref(a, c.name, c.type, c.wide) for c in t.columns]

    def relation(self, depth: int) -> tuple[str, list[Ref]]:
        if depth > 0 and self.chance(0.15):
            self.shape.add("derived")
            sel = self.select(depth - 1, allow_order=True)
            a = self.alias("d")
            return f"({sel.sql}) AS {a}", [Ref(a, f"c{i}", c.type, c.wide) for i, c in enumerate(sel.columns)]
        return self.base_relation()

    def join_condition(self, left: list[Ref], right: list[Ref], depth: int) -> str:
        pairs = [(a, b) for a in left for b in right if a.type.family == b.type.family and a.type.family != BOOL]
        keyish = [(a, b) for a, b in pairs if {a.name, b.name} & {"k", "id", "id2"} or a.name == b.name]
        conds = []
        for _ in range(1 if self.chance(0.75) else 2):
            if not pairs:
                break
            a, b = self.pick(keyish) if keyish and self.chance(0.7) else self.pick(pairs)
            conds.append(f"{a.sql} {'=' if self.chance(0.9) else self.pick(['<', '<=>', '>='])} {b.sql}")
        if not conds or self.chance(0.2):
            conds.append(self.pred(left + right, min(depth, 1), subqueries=False))
        return " AND ".join(conds)

    def from_clause(self, depth: int, max_rels: int = 3) -> tuple[str, list[Ref]]:
        n = self.pick([1, 2, 3][:max_rels], [5, 4, 1][:max_rels])
        sql, scope = self.relation(depth)
        for _ in range(n - 1):
            kind = self.pick(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN", "LEFT SEMI JOIN",
                              "LEFT ANTI JOIN"], [6, 3, 2, 2, 1 if n == 2 else 0, 2, 2])
            rsql, rscope = self.relation(depth)
            self.shape.add((kind.lower().replace(" join", "").replace("join", "inner")).replace(" ", "-") + "-join")
            if kind == "CROSS JOIN":
                sql = f"{sql} CROSS JOIN {rsql}"
                scope = scope + rscope
                continue
            cond = self.join_condition(scope, rscope, depth)
            sql = f"{sql} {kind} {rsql} ON {cond}"
            if "SEMI" not in kind and "ANTI" not in kind:
                scope = scope + rscope
        return sql, scope

    # --- SELECT ---------------------------------------------------------------------------------------

    def order_all(self, n: int) -> str:
        parts = []
        for i in range(1, n + 1):
            parts.append(f"{i} {self.pick(['ASC', 'DESC'])} {self.pick(['NULLS FIRST', 'NULLS LAST'])}")
        return "ORDER BY " + ", ".join(parts)

    def limit(self) -> str:
        text = f" LIMIT {self.pick([1, 2, 3, 5, 10, 20])}"
        if self.chance(0.3):
            text += f" OFFSET {self.pick([1, 2, 5])}"
        return text

    def select(self, depth: int, want: list[str] | None = None, allow_order: bool = False) -> Sel:
        """A SELECT of some shape; with `want` (families), a plain projection of those families."""
        if want is not None:
            return self.plain(depth, want)
        shape = self.pick(["plain", "group", "global", "grouping", "window", "setop"], [8, 6, 2, 1, 2, 2])
        if shape == "setop" and depth <= 0:
            shape = "plain"
        sel = {"plain": self.plain, "group": self.group, "global": self.global_agg, "grouping": self.grouping,
               "window": self.window, "setop": self.setop}[shape](depth)
        self.shape.add(shape)
        if allow_order and self.chance(0.2) and sel.columns:
            sel.sql = f"{sel.sql} {self.order_all(len(sel.columns))}{self.limit()}"
            self.shape.add("limit")
        return sel

    def where(self, scope: list[Ref], depth: int) -> str:
        if self.chance(0.6):
            return f" WHERE {self.pred(scope, depth + 1, subqueries=True)}"
        return ""

    def projection(self, items: list[E]) -> str:
        return ", ".join(f"{e.sql} AS c{i}" for i, e in enumerate(items))

    def plain(self, depth: int, want: list[str] | None = None) -> Sel:
        frm, scope = self.from_clause(depth)
        if want is None:
            items = [self.expr(scope, None, self.pick([0, 0, 1, 2])) for _ in range(self.rng.randint(1, 5))]
            if self.chance(0.12):
                sub = self.scalar_subquery(scope, max(depth, 0))
                if sub is not None:
                    items.append(sub)
        else:
            items = [self.expr(scope, fam, self.pick([0, 0, 1])) for fam in want]
        distinct = "DISTINCT " if self.chance(0.15) else ""
        if distinct:
            self.shape.add("distinct")
        return Sel(f"SELECT {distinct}{self.projection(items)} FROM {frm}{self.where(scope, depth)}", items)

    def group_keys(self, scope: list[Ref], n: int) -> list[E]:
        keys = []
        for _ in range(n):
            if self.chance(0.8):
                c = self.column(scope)
                keys.append(E(c.sql, c.type, c.wide))
            else:
                keys.append(self.expr(scope, None, 1))
        out, seen = [], set()
        for k in keys:
            if k.sql not in seen:
                seen.add(k.sql)
                out.append(k)
        return out

    def having(self, scope: list[Ref], keys: list[E]) -> str:
        if not self.chance(0.35):
            return ""
        conds = []
        for _ in range(self.rng.randint(1, 2)):
            agg = self.aggregate(scope)
            if agg is None:
                continue
            if agg.family in (BOOL,):
                continue
            conds.append(f"{agg.sql} {self.pick(['>', '<', '=', '>=', '<>'])} {self.literal(agg.type, edge=False)}")
        if not conds:
            return ""
        return " HAVING " + f" {self.pick(['AND', 'OR'])} ".join(conds)

    def group(self, depth: int) -> Sel:
        frm, scope = self.from_clause(depth)
        keys = self.group_keys(scope, self.pick([1, 1, 2, 3]))
        aggs = [a for a in (self.aggregate(scope) for _ in range(self.rng.randint(1, 4))) if a is not None]
        items = [k for k in keys if self.chance(0.85)] + aggs
        return Sel(f"SELECT {self.projection(items)} FROM {frm}{self.where(scope, depth)} GROUP BY "
                   f"{', '.join(k.sql for k in keys)}{self.having(scope, keys)}", items)

    def global_agg(self, depth: int) -> Sel:
        frm, scope = self.from_clause(depth)
        aggs = [a for a in (self.aggregate(scope) for _ in range(self.rng.randint(1, 4))) if a is not None]
        return Sel(f"SELECT {self.projection(aggs)} FROM {frm}{self.where(scope, depth)}{self.having(scope, [])}", aggs)

    def grouping(self, depth: int) -> Sel:
        frm, scope = self.from_clause(depth, max_rels=2)
        cols = []
        for _ in range(self.rng.randint(1, 3)):
            c = self.column(scope)
            if c.sql not in [x.sql for x in cols]:
                cols.append(E(c.sql, c.type, c.wide))
        aggs = [a for a in (self.aggregate(scope) for _ in range(self.rng.randint(1, 3))) if a is not None]
        names = [c.sql for c in cols]
        k = self.pick(["ROLLUP", "CUBE", "SETS"])
        if k == "SETS":  # the first set has every column (each selected column must be in a set)
            sets = [f"({', '.join(names)})"] + [
                "(" + ", ".join(self.rng.sample(names, self.rng.randint(0, len(names)))) + ")"
                for _ in range(self.rng.randint(0, 2))]
            clause = f"GROUPING SETS ({', '.join(sets)})"
        else:
            clause = f"{k}({', '.join(names)})"
        items = cols + aggs
        if self.chance(0.3):
            items.append(E(f"grouping({cols[0].sql})", SqlType("smallint")))
        self.shape.add("grouping-" + k.lower())
        return Sel(f"SELECT {self.projection(items)} FROM {frm}{self.where(scope, depth)} GROUP BY {clause}", items)

    def window(self, depth: int) -> Sel:
        frm, scope = self.from_clause(depth, max_rels=2)
        items = [self.expr(scope, None, 0) for _ in range(self.rng.randint(1, 3))]
        order_dependent = False
        for _ in range(self.rng.randint(1, 2)):
            call, dependent = self.window_call(scope, order_free=order_dependent)
            items.append(call)
            order_dependent |= dependent
        return Sel(f"SELECT {self.projection(items)} FROM {frm}{self.where(scope, depth)}", items)

    def window_call(self, scope: list[Ref], order_free: bool = False) -> tuple[E, bool]:
        """A window function, and whether its value depends on the order among peers. With
        `order_free` such a one becomes its order-free kin over the same draws (rank, or a RANGE
        aggregate: count, sum), so the queries of every seed stay as they were otherwise."""
        part = [self.column(scope).sql for _ in range(self.pick([0, 1, 1, 2]))]
        order = self.column(scope)
        direction = self.pick(["ASC", "DESC"])
        ties_matter = [f"{r.sql}" for r in scope if r.sql != order.sql]
        fn = self.pick(["row_number", "rank", "dense_rank", "sum", "avg", "min", "max", "count", "lag", "lead",
                        "sum_rows", "ntile"])
        partition = f"PARTITION BY {', '.join(dict.fromkeys(part))} " if part else ""
        total = ", ".join([f"{order.sql} {direction}"] + ties_matter)
        peers = f"{partition}ORDER BY {order.sql} {direction}"  # an order-free window's
        if fn in ("rank", "dense_rank"):
            return E(f"{fn}() OVER ({peers})", SqlType("int")), False
        if fn in ("row_number", "ntile"):
            arg = str(self.rng.randint(2, 4)) if fn == "ntile" else ""
            if order_free:
                return E(f"rank() OVER ({peers})", SqlType("int")), False
            return E(f"{fn}({arg}) OVER ({partition}ORDER BY {total})", SqlType("int")), True
        if fn in ("lag", "lead"):
            a = self.expr(scope, None, 0)
            offset = self.pick([1, 1, 2])
            if order_free:
                return E(f"count({a.sql}) OVER ({peers})", SqlType("bigint")), False
            return E(f"{fn}({a.sql}, {offset}) OVER ({partition}ORDER BY {total})", a.type), True
        src = self.pick([INT, DEC, FLOAT]) if fn not in ("min", "max", "count") else None
        a = self.narrow(scope, src, 0) if src else self.expr(scope, None, 0)
        name = fn.replace("_rows", "")
        if name == "count":
            t = SqlType("bigint")
        elif name in ("min", "max"):
            t = a.type
        elif name == "avg":
            t = DEFAULT[DEC] if src == DEC else SqlType("double")
        else:
            t = {INT: SqlType("bigint"), FLOAT: SqlType("double")}.get(src, DEFAULT[DEC])
        if fn == "sum_rows":
            frame = self.pick(["ROWS BETWEEN 1 PRECEDING AND CURRENT ROW",
                               "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING",
                               "ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING"])
            if order_free:
                return E(f"sum({a.sql}) OVER ({peers})", t), False
            return E(f"sum({a.sql}) OVER ({partition}ORDER BY {total} {frame})", t), True
        if self.chance(0.3):
            return E(f"{name}({a.sql}) OVER ({partition.strip()})", t), False
        return E(f"{name}({a.sql}) OVER ({peers})", t), False

    def setop(self, depth: int) -> Sel:
        left = self.select(depth - 1) if self.chance(0.3) else self.plain(depth - 1)
        fams = [c.family for c in left.columns]
        right = self.plain(depth - 1, want=fams)
        op = self.pick(["UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"], [3, 3, 2, 2, 1, 1])
        self.shape.add(op.lower().replace(" ", "-"))
        cols = [E(f"c{i}", c.type if c.type == r.type else DEFAULT[c.family], c.wide or r.wide)
                for i, (c, r) in enumerate(zip(left.columns, right.columns))]
        return Sel(f"{left.sql} {op} {right.sql}", cols)

    # --- the top --------------------------------------------------------------------------------------

    def query(self) -> tuple[str, bool]:
        if self.chance(0.12):
            self.shape.add("cte")
            for _ in range(self.rng.randint(1, 2)):
                sel = self.select(1)
                name = f"w{len(self.ctes)}"
                self.ctes.append((name, sel.columns))
                self.cte_sql.append(f"{name} AS ({sel.sql})")
        sel = self.select(2)
        text = sel.sql
        ordered = False
        if self.chance(0.35):
            text = f"{text} {self.order_all(len(sel.columns))}"
            ordered = True
            if self.chance(0.7):
                text += self.limit()
                self.shape.add("limit")
        if self.cte_sql:
            text = f"WITH {', '.join(self.cte_sql)} {text}"
        return text, ordered


def generate(schema: Schema, seed: int, index: int) -> Query:
    """Query number `index` of `seed` over `schema`: the same text every time."""
    rng = random.Random(f"query-{seed}-{index}")
    g = Gen(schema, rng)
    text, ordered = g.query()
    return Query(seed, index, text, ordered, ",".join(sorted(g.shape)))
