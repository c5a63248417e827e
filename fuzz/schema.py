"""Random schemas and rows, deterministic from a seed.

Every value is chosen to sit on a trap where engines tend to disagree: numeric values at their
type's precision limit, doubles that are -0.0, NaN or infinite, strings that differ only in case,
accents, trailing blanks or LIKE metacharacters, dates in year 1, 1582 and 9999, Postgres'
'infinity' dates (mapped by spark-htap to the ends of Spark's range). Columns are NULL often and
draw from small pools shared by all tables, so joins, IN lists and groups have many matches:
every table has an integer column `k` over 0..9, and every other column type draws from one
pool per type, so any two columns of a family join with matches.

Doubles are mostly multiples of 1/8 of small magnitude: their sums are exact in any order, so
that the only floating-point differences the comparison has to tolerate come from the few
non-dyadic values (0.1, 1/3) and the tiny denormals (see compare.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa

# Type families: what may be compared, joined, unioned with what (see grammar.py).
INT, DEC, FLOAT, STR, BOOL, DATE, TS, TSNTZ = "int", "dec", "float", "str", "bool", "date", "ts", "tsntz"
NUMERIC_FAMILIES = (INT, DEC, FLOAT)


@dataclass(frozen=True)
class SqlType:
    """A column type, in Postgres and in Spark terms. `kind` is one of: smallint, int, bigint,
    decimal, double, float, text, varchar, char, bool, date, timestamp (Postgres timestamptz,
    Spark TIMESTAMP) and timestamp_ntz (Postgres timestamp)."""

    kind: str
    precision: int = 0
    scale: int = 0
    length: int = 0

    @property
    def family(self) -> str:
        return {
            "smallint": INT, "int": INT, "bigint": INT, "decimal": DEC, "double": FLOAT, "float": FLOAT,
            "text": STR, "varchar": STR, "char": STR, "bool": BOOL, "date": DATE, "timestamp": TS,
            "timestamp_ntz": TSNTZ,
        }[self.kind]

    @property
    def pg(self) -> str:
        return {
            "smallint": "smallint", "int": "integer", "bigint": "bigint", "double": "double precision",
            "float": "real", "text": "text", "bool": "boolean", "date": "date", "timestamp": "timestamptz",
            "timestamp_ntz": "timestamp",
        }.get(self.kind) or {
            "decimal": f"numeric({self.precision},{self.scale})", "varchar": f"varchar({self.length})",
            "char": f"char({self.length})",
        }[self.kind]

    @property
    def spark(self) -> str:
        """The Spark type the oracle declares (CHAR(n) for char(n): Spark's own CHAR semantics)."""
        return {
            "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT", "double": "DOUBLE", "float": "FLOAT",
            "text": "STRING", "varchar": "STRING", "bool": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMP",
            "timestamp_ntz": "TIMESTAMP_NTZ",
        }.get(self.kind) or {
            "decimal": f"DECIMAL({self.precision},{self.scale})", "char": f"CHAR({self.length})",
        }[self.kind]

    @property
    def arrow(self) -> pa.DataType:
        return {
            "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
            "float": pa.float32(), "text": pa.string(), "varchar": pa.string(), "char": pa.string(),
            "bool": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
        }.get(self.kind) or pa.decimal128(self.precision, self.scale)

    @property
    def int_range(self) -> tuple[int, int]:
        bits = {"smallint": 16, "int": 32, "bigint": 64}[self.kind]
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


@dataclass(frozen=True)
class Column:
    """`wide`: the column holds values at its type's limits (sums and products of it overflow),
    so the query grammar keeps arithmetic mostly off it."""

    name: str
    type: SqlType
    key: bool = False
    wide: bool = False


@dataclass
class Table:
    name: str
    columns: tuple[Column, ...]
    rows: list[tuple] = field(default_factory=list)  # the initial rows, in column order

    @property
    def key(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.key)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


@dataclass
class Schema:
    seed: int
    tables: tuple[Table, ...]
    chars: bool

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)


# --- value pools ---------------------------------------------------------------------------------

LONG_TEXT = "L" * 2500 + "-end"  # TOASTed: an update of another column sends it as "unchanged"
STRINGS = [
    "a", "A", "á", "ä", "Ä", "ß", "ss", "SS", "ab", "ab ", " ab", "ab  ", "", " ", "%", "_", "a%b", "a_b", "axb",
    "\\", "a\\b", "a\\%", "日本", "😀", "é", "É", "e\u0301", "ǅ", "İ", "ﬁ", "Straße", "x\ty", "NULL", "abc",
    "abcdef", "zebra", "Zebra", "0", "10", "9", "k1", "k2", "K1",
]
DATES = [
    dt.date(2024, 1, 1), dt.date(2024, 2, 29), dt.date(2023, 12, 31), dt.date(2000, 1, 1), dt.date(1970, 1, 1),
    dt.date(1969, 12, 31), dt.date(1582, 10, 15), dt.date(1582, 10, 4), dt.date(1582, 10, 10), dt.date(1, 1, 1),
    dt.date(9999, 12, 31), dt.date(2024, 3, 10), dt.date(2030, 6, 15), dt.date(1900, 2, 28),
]
TIMES = [dt.time(0, 0), dt.time(23, 59, 59, 999999), dt.time(12, 30, 0, 500000), dt.time(1, 2, 3), dt.time(0, 0, 0, 1)]
DYADIC = [k / 8 for k in range(-40, 41)]
DOUBLE_SPECIALS = [-0.0, 0.0, float("nan"), float("inf"), float("-inf"), 1e-300, 5e-324, 1e300,
                   1.7976931348623157e308, 0.1, 1 / 3, 2.5e-5]
FLOAT_SPECIALS = [-0.0, 0.0, float("nan"), float("inf"), float("-inf"), 3.4028234663852886e38, 1.401298464324817e-45,
                  0.1]
INFINITIES = ["infinity", "-infinity"]  # Postgres' infinite dates and timestamps, as text


def _key_type(rng: random.Random) -> SqlType:
    return SqlType(rng.choice(["int", "int", "bigint", "text"]))


def _value_type(rng: random.Random, chars: bool) -> tuple[SqlType, str]:
    """A value column's type and its name's prefix."""
    kinds = ["smallint", "int", "bigint", "decimal", "decimal", "double", "double", "float", "text", "text",
             "varchar", "bool", "date", "timestamp", "timestamp_ntz", "char"]
    kind = rng.choice(kinds)
    if kind == "decimal":
        p = rng.choice([5, 9, 10, 12, 18, 19, 20, 28, 38, 38])
        s = rng.choice([0, 1, 2, 2, 4, min(p, 10), min(p - 1, 6)])
        return SqlType(kind, precision=p, scale=max(0, min(s, p))), _ABBR[kind]
    if kind == "varchar":
        return SqlType(kind, length=rng.randint(2, 8)), _ABBR[kind]
    if kind == "char":  # without chars, the same column (name too) as varchar(n): the same queries
        return SqlType(kind if chars else "varchar", length=rng.randint(1, 5)), _ABBR[kind]
    return SqlType(kind), _ABBR[kind]


_ABBR = {"smallint": "si", "int": "i", "bigint": "bi", "decimal": "n", "double": "d", "float": "r", "text": "s",
         "varchar": "vc", "char": "ch", "bool": "b", "date": "dt", "timestamp": "tz", "timestamp_ntz": "ts"}


def generate(seed: int, chars: bool = True, min_rows: int = 20, max_rows: int = 200) -> Schema:
    """2-4 tables with 1-2 key columns and 3-8 other columns (plus `k`), 20-200 rows each.
    `chars=False` declares every char(n) column varchar(n) and changes nothing else (same names,
    rows and queries), so a run without them tells char(n) failures from the rest."""
    rng = random.Random(f"schema-{seed}")
    tables = []
    for t in range(rng.randint(2, 4)):
        cols: list[Column] = []
        nkeys = 1 if rng.random() < 0.7 else 2
        for j in range(nkeys):
            typ = _key_type(rng) if j else SqlType(rng.choice(["int", "bigint", "int", "text"]))
            cols.append(Column("id" if j == 0 else "id2", typ, key=True))
        cols.append(Column("k", SqlType("int")))
        for j in range(rng.randint(3, 8)):
            typ, prefix = _value_type(rng, chars)
            wide = typ.family in (INT, DEC) and rng.random() < 0.25
            cols.append(Column(f"{prefix}{j + 1}", typ, wide=wide))
        table = Table(f"t{t}", tuple(cols))
        table.rows = rows(table, rng, rng.randint(min_rows, max_rows), first_key=1)
        tables.append(table)
    return Schema(seed, tuple(tables), chars)


def rows(table: Table, rng: random.Random, n: int, first_key: int) -> list[tuple]:
    """`n` rows whose keys are distinct and start at `first_key` (rows of other tables overlap in
    key values, so joins on keys match too)."""
    nulls = {c.name: rng.choice([0.0, 0.1, 0.1, 0.2, 0.3, 0.6]) for c in table.columns}
    out = []
    key_values = list(range(first_key, first_key + n))
    rng.shuffle(key_values)
    for i in range(n):
        row = []
        for c in table.columns:
            if c.key:
                row.append(key_value(c.type, key_values[i], c.name != "id"))
            elif rng.random() < nulls[c.name]:
                row.append(None)
            else:
                row.append(value(c, rng))
        out.append(tuple(row))
    return out


def key_value(typ: SqlType, n: int, second: bool) -> object:
    if second:  # the second key column: few distinct values, the pair stays unique through the first
        n = n % 3
    if typ.kind == "text":
        return STRINGS[n % len(STRINGS)] + f"#{n}" if n % 4 == 0 else f"k{n:03d}"
    return n


def value(c: Column, rng: random.Random) -> object:
    """One non-NULL value for column `c` (Python values; special floats as floats, Postgres'
    infinities and numeric NaN as text, cast on insert)."""
    t = c.type
    kind = t.kind
    if c.name == "k":
        return rng.randint(0, 9)
    if t.family == INT:
        lo, hi = t.int_range
        if c.wide and rng.random() < 0.15:
            return rng.choice([lo, hi, lo + 1, hi - 1, 0])
        return rng.randint(-5, 20)
    if kind == "decimal":
        return _decimal(t, c.wide, rng)
    if kind == "double":
        return rng.choice(DOUBLE_SPECIALS) if rng.random() < 0.25 else rng.choice(DYADIC)
    if kind == "float":
        return rng.choice(FLOAT_SPECIALS) if rng.random() < 0.2 else rng.choice(DYADIC)
    if kind in ("text", "varchar", "char"):
        s = LONG_TEXT if kind == "text" and rng.random() < 0.02 else rng.choice(STRINGS)
        if kind in ("varchar", "char"):
            s = s[: t.length]
        return s
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "date":
        return rng.choice(INFINITIES) if rng.random() < 0.03 else rng.choice(DATES)
    if kind in ("timestamp", "timestamp_ntz"):
        if rng.random() < 0.03:
            return rng.choice(INFINITIES)
        d = rng.choice(DATES)
        t_ = rng.choice(TIMES)
        v = dt.datetime.combine(d, t_)
        return v.replace(tzinfo=dt.timezone.utc) if kind == "timestamp" else v
    raise AssertionError(kind)


def _decimal(t: SqlType, wide: bool, rng: random.Random) -> object:
    with decimal.localcontext() as ctx:
        ctx.prec = 80  # the default 28 digits would round a numeric(38, s) limit up past it
        return _decimal_value(t, wide, rng)


def _decimal_value(t: SqlType, wide: bool, rng: random.Random) -> object:
    p, s = t.precision, t.scale
    limit = Decimal(10) ** (p - s) - Decimal(1).scaleb(-s)  # the largest value: p nines
    r = rng.random()
    if r < 0.02:
        return "NaN"
    if wide and r < 0.2:
        return rng.choice([limit, -limit, limit - 1 if p - s > 1 else limit, Decimal(1).scaleb(-s)])
    # small values: quarters from -20 to 60, at the column's scale (rounded when it has fewer digits)
    v = (Decimal(rng.randint(-80, 240)) / 4).quantize(Decimal(1).scaleb(-s))
    return v if abs(v) <= limit else limit.copy_sign(v)
