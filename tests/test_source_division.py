"""The pushed AVG of decimals (htap.rewrite.tree `divide`, spelled for the source by
htap.rewrite.dialects) run by the real Postgres and MariaDB a failed-over tree is sent to: every
answer is Spark's, value and scale (tests/decimal_support.py follows Spark's steps), and NULL
for no rows. DuckDB's spelling is checked in tests/unit/test_render_tree.py."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from decimal_support import avg_of, spark_avg, unscaled_decimals
from htap.rewrite import dialects
from htap.rewrite.subplan import PushedSubplan
from htap.rewrite.tree import render_tree_over

SHAPES = [(15, 2), (12, 0), (20, 5), (34, 10), (18, 18)]


def avg_query(dialect: str, table: str, p: int, s: int) -> str:
    raw = {"tree": {"leaves": [{"table": "s.d", "pushed": {"filters": [], "columns": ["v"]}}], "root": {
        "node": "aggregate", "group_by": [], "child": {"node": "scan", "leaf": 0, "output": ["c4"]},
        "exprs": [{"name": "c5", "expr": avg_of({"col": "c4", "type": f"decimal({p},{s})"}, p, s)}]}}}
    subplan = PushedSubplan.from_dict(raw)
    query = render_tree_over(subplan, [exp.to_table(table)], [["v"]])
    return dialects.for_source(query, dialect).sql(dialect)


def average(conn, dialect: str, values: list[Decimal | None], p: int, s: int):
    table = "htap_avg_division"
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (v DECIMAL({p}, {s}))")
        if values:
            cur.executemany(f"INSERT INTO {table} VALUES (%s)", [(None if v is None else format(v, "f"),) for v in values])
        cur.execute(avg_query(dialect, table, p, s))
        return cur.fetchone()[0]


def check(conn, dialect: str, values: list[Decimal | None], p: int, s: int) -> None:
    got = average(conn, dialect, values, p, s)
    expected = spark_avg(values, p, s)
    assert got == expected and (got is None or got.as_tuple().exponent == -(s + 4)), (dialect, values, got, expected)


TIES = [(["0.01"] + ["0.00"] * 31, "0.000313"), (["-0.01"] + ["0.00"] * 31, "-0.000313"),
        (["0.02", "0.00", "0.00"], "0.006667"), (["9999999999999.99"] * 3, "9999999999999.990000"), ([None], None)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.sampled_from(SHAPES))
def test_postgres_averages_decimals_as_spark(pg, data, shape):
    p, s = shape
    check(pg, "postgres", data.draw(st.lists(st.one_of(st.none(), unscaled_decimals(p, s)), max_size=10)), p, s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.sampled_from(SHAPES))
def test_mariadb_averages_decimals_as_spark(mysql, data, shape):
    p, s = shape
    check(mysql, "mysql", data.draw(st.lists(st.one_of(st.none(), unscaled_decimals(p, s)), max_size=10)), p, s)


@pytest.mark.parametrize("values, expected", TIES)
def test_ties_round_away_from_zero_on_both_sources(pg, mysql, values, expected):
    decimals = [None if v is None else Decimal(v) for v in values]
    for conn, dialect in ((pg, "postgres"), (mysql, "mysql")):
        assert average(conn, dialect, decimals, 15, 2) == (None if expected is None else Decimal(expected)), dialect
