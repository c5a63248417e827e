"""Source-rendered SQL per dialect (connectors' relations + rewrite/dialects.py): golden files
for Postgres and MySQL/MariaDB, and the three-valued logic of MySQL's special-double rewrites.
The same cases run against the real servers in tests/test_same_answers.py."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pyarrow as pa
import pytest
from sqlglot import exp
from unit_support import check_golden, lit_json

from htap.conf import MySQLConfig, PostgresConfig
from htap.connectors.mysql.reads import MySQLQueryable
from htap.connectors.postgres import PostgresSource
from htap.connectors.tables import Column
from htap.rewrite import dialects
from htap.rewrite.subplan import PushedSubplan


@dataclass(frozen=True)
class Table:
    columns: tuple[Column, ...]
    arrow_schema: pa.Schema
    id: int = 1
    schema: str = "shop"
    name: str = "t"
    key: tuple[str, ...] = ("id",)
    copy_seq: int | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


PG_TABLE = Table(
    (Column("id", "integer", False), Column("s", "text", True), Column("c", "character(4)", True),
     Column("u", "uuid", True), Column("d", "double precision", True), Column("ts", "timestamp with time zone", True),
     Column("o", "numeric", True, override="string")),
    pa.schema([("id", pa.int32()), ("s", pa.string()), ("c", pa.string()), ("u", pa.string()), ("d", pa.float64()),
               ("ts", pa.timestamp("us", tz="UTC")), ("o", pa.string())]),
)
MY_TABLE = Table(
    (Column("id", "int(11)", False), Column("s", "varchar(20)", True), Column("c", "char(4)", True),
     Column("tm", "time", True), Column("d", "double", True), Column("ts", "timestamp(6)", True),
     Column("tsn", "datetime(6)", True), Column("b", "varbinary(8)", True)),
    pa.schema([("id", pa.int32()), ("s", pa.string()), ("c", pa.string()), ("tm", pa.string()), ("d", pa.float64()),
               ("ts", pa.timestamp("us", tz="UTC")), ("tsn", pa.timestamp("us")), ("b", pa.binary())]),
)


def f(op, col, type_, value):
    return {"op": op, "col": col, "value": lit_json(type_, value)}


CASES: dict[str, dict] = {
    "string order by code point": {"filters": [f("gt", "s", "string", "M"), f("le", "s", "string", "v")]},
    "string equality is case- and padding-sensitive": {"filters": [f("eq", "s", "string", "ab ")]},
    "char(n) compares its padded value": {"filters": [f("eq", "c", "string", "ab  ")]},
    "like escapes": {"filters": [f("starts_with", "s", "string", "50%_off"), f("ends_with", "s", "string", "C:\\"),
                                 f("contains", "s", "string", "it's")]},
    "group by and min/max of strings": {"group_by": ["s"], "aggregates": [{"fn": "min", "col": "c"}, {"fn": "count_star"}]},
    "special doubles": {"filters": [f("lt", "d", "double", "NaN"), f("ge", "d", "double", "Infinity"),
                                    f("gt", "d", "double", "-Infinity"), f("eq_null_safe", "d", "double", "NaN"),
                                    {"op": "in", "col": "d", "values": [lit_json("double", "Infinity"), lit_json("double", 1.5)]},
                                    {"op": "in", "col": "d", "values": [lit_json("double", "NaN")]}]},
    "finite doubles and -0.0": {"filters": [f("eq", "d", "double", -0.0), f("gt", "d", "double", 0.1)]},
    "timestamps keep microseconds and UTC": {"filters": [f("ge", "ts", "timestamp", 1_700_000_000_123_456),
                                                         f("lt", "ts", "timestamp", -1)]},
    "nulls": {"filters": [{"op": "not", "arg": f("eq", "id", "long", 1)}, f("eq_null_safe", "s", "null", None)]},
}
MY_CASES = {**CASES, "timestamp_ntz keeps microseconds": {"filters": [f("eq", "tsn", "timestamp_ntz", "2024-02-29T23:59:59.999999")]}}


def test_golden_postgres_source_sql():
    src = PostgresSource(PostgresConfig(name="p", dsn=""))
    check_golden("source_postgres.sql", {case: src.render(PG_TABLE, PushedSubplan.from_dict(raw)) for case, raw in CASES.items()})


def test_golden_mysql_source_sql():
    src = MySQLQueryable(MySQLConfig(name="m"), collation="utf8mb4_nopad_bin")
    check_golden("source_mysql.sql", {case: src.render(MY_TABLE, PushedSubplan.from_dict(raw)) for case, raw in MY_CASES.items()})


# --- MySQL's special doubles: the rewrite keeps Spark's answer in three-valued logic ---------------

SPECIALS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
OPS = {"eq": lambda a, b: a == b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
       "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def spark_compare(op: str, value: float | None, literal: float):
    """Spark's comparison: NaN equals NaN and sits above +inf; NULL gives NULL."""
    if value is None:
        return None
    key = lambda x: (1, 0.0) if x != x else (0, x)  # noqa: E731
    return OPS[op](key(value), key(literal))


def evaluate(node: exp.Expression, value: float | None):
    """The rewritten condition for a column holding `value` (MySQL doubles are finite)."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, value)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, (exp.EQ, exp.NEQ)) and isinstance(node.expression, exp.Column):
        return None if value is None else isinstance(node, exp.EQ)
    raise AssertionError(f"unexpected rewrite {node.sql('mysql')}")


@pytest.mark.parametrize("op,special,value", list(itertools.product(OPS, SPECIALS, [None, -1e308, -0.0, 0.0, 2.5, 1e308])))
def test_mysql_special_double_comparisons_keep_sparks_answer(op, special, value):
    from htap.rewrite.render import predicate
    from htap.rewrite.subplan import Literal, Predicate

    rewritten = dialects.for_source(predicate(Predicate(op, col="d", value=Literal("double", special))), "mysql")
    assert evaluate(rewritten, value) == spark_compare(op, value, SPECIALS[special])
