"""Source-rendered SQL per dialect (connectors' relations + rewrite/dialects.py): golden files
for Postgres and MySQL/MariaDB, and the three-valued logic of MySQL's special-double rewrites.
The same cases run against the real servers in tests/test_same_answers.py."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pyarrow as pa
import pytest
from sqlglot import exp
from unit_support import agg, check_golden, cmp, col, in_, not_, one_scan

from htap.conf import MySQLConfig, PostgresConfig
from htap.connectors.mysql.reads import MySQLQueryable
from htap.connectors.postgres import PostgresSource
from htap.connectors.tables import Column
from htap.errors import SourceError
from htap.rewrite import dialects, render
from htap.rewrite.pushed import Expr, Literal, PlanError, PushedPlan


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


def rows(table: Table, *filters: Expr) -> PushedPlan:
    """A scan of every column of the table with `filters` (one task per key range)."""
    return one_scan([c.name for c in table.columns], filters, table=table.qualified_name)


def cases(table: Table) -> dict[str, PushedPlan]:
    return {
        "string order by code point": rows(table, cmp("gt", "s", "string", "M"), cmp("le", "s", "string", "v")),
        "string equality is case- and padding-sensitive": rows(table, cmp("eq", "s", "string", "ab ")),
        "char(n) compares its padded value": rows(table, cmp("eq", "c", "string", "ab  ")),
        "like escapes": rows(table, cmp("starts_with", "s", "string", "50%_off"), cmp("ends_with", "s", "string", "C:\\"),
                             cmp("contains", "s", "string", "it's")),
        "group by and min/max of strings": one_scan(
            ["s", "c"], table=table.qualified_name, group_by=[col("s", "string")],
            aggregate=[("s", col("s", "string")), ("c7", agg("min", col("c", "string"), type_="string")), ("c8", agg("count_star"))]),
        "special doubles": rows(table, cmp("lt", "d", "double", "NaN"), cmp("ge", "d", "double", "Infinity"),
                                cmp("gt", "d", "double", "-Infinity"), cmp("eq_null_safe", "d", "double", "NaN"),
                                in_("d", ("double", "Infinity"), ("double", 1.5)), in_("d", ("double", "NaN"))),
        "finite doubles and -0.0": rows(table, cmp("eq", "d", "double", -0.0), cmp("gt", "d", "double", 0.1)),
        "timestamps keep microseconds and UTC": rows(table, cmp("ge", "ts", "timestamp", 1_700_000_000_123_456),
                                                     cmp("lt", "ts", "timestamp", -1)),
        "nulls": rows(table, not_(cmp("eq", "id", "long", 1, spark="int")), cmp("eq_null_safe", "s", "null", None)),
    }


def test_golden_postgres_source_sql():
    src = PostgresSource(PostgresConfig(name="p", dsn=""))
    check_golden("source_postgres.sql", {case: src.render([PG_TABLE], plan) for case, plan in cases(PG_TABLE).items()})


def test_golden_mysql_source_sql():
    src = MySQLQueryable(MySQLConfig(name="m"), collation="utf8mb4_nopad_bin")
    my_cases = {**cases(MY_TABLE), "timestamp_ntz keeps microseconds": rows(
        MY_TABLE, cmp("eq", "tsn", "timestamp_ntz", "2024-02-29T23:59:59.999999"))}
    check_golden("source_mysql.sql", {case: src.render([MY_TABLE], plan) for case, plan in my_cases.items()})


def test_a_plan_is_rendered_over_as_many_tables_as_it_scans():
    src = PostgresSource(PostgresConfig(name="p", dsn=""))
    with pytest.raises(SourceError, match="1 scans rendered over 2 tables"):
        src.render([PG_TABLE, PG_TABLE], rows(PG_TABLE))


def test_mysql_refuses_a_special_double_it_cannot_decide():
    # NaN inside arithmetic: MySQL holds no NaN and no rewrite decides it, so the source cannot answer.
    plus = Expr.call("+", "double", col("d", "double"), Expr.literal(Literal("double", "NaN"), "double"))
    with pytest.raises(PlanError, match="holds no nan"):
        dialects.for_source(render.expr(Expr.call(">", "boolean", plus, col("d", "double"))), "mysql")


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
@pytest.mark.parametrize("text", ["0000-01-01", "-0001-12-31", "+10000-01-01"])
def test_a_date_outside_years_1_to_9999_is_not_sent_to_a_source(dialect, text):
    # Spark's calendar has a year 0 (ADD_MONTHS(DATE '0001-01-01', -12)); Postgres rejected it.
    year0 = Expr.call("=", "boolean", col("dt", "date"), Expr.literal(Literal("date", text), "date"))
    with pytest.raises(PlanError, match="outside years 1..9999"):
        dialects.for_source(render.expr(year0), dialect)
    ok = Expr.call("=", "boolean", col("dt", "date"), Expr.literal(Literal("date", "0001-01-01"), "date"))
    dialects.for_source(render.expr(ok), dialect)


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
    rewritten = dialects.for_source(render.expr(cmp(op, "d", "double", special)), "mysql")
    assert evaluate(rewritten, value) == spark_compare(op, value, SPECIALS[special])
    # the literal first: `NaN > d` is `d < NaN`
    flipped = {"eq": "=", "lt": ">", "le": ">=", "gt": "<", "ge": "<="}[op]
    literal_first = Expr.call(flipped, "boolean", Expr.literal(Literal("double", special), "double"), col("d", "double"))
    assert evaluate(dialects.for_source(render.expr(literal_first), "mysql"), value) == spark_compare(op, value, SPECIALS[special])
