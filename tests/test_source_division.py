"""The pushed AVG of decimals (htap.rewrite.render `divide`, spelled for the source by
htap.rewrite.dialects) run by the real Postgres and MariaDB a failed-over scan is sent to, in both
of the shapes the shim sends it: a whole subtree's (PlanTranslator: Spark's Average as sum over
count, columns named by expression ids) and a single table's scan in one task (HtapScanBuilder:
a complete aggregate over the table's columns). Every answer is Spark's, value and scale
(tests/decimal_support.py follows Spark's steps), and NULL for no rows. DuckDB's spelling is
checked in the unit tier."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from decimal_support import avg_of, spark_avg, unscaled_decimals
from htap.rewrite import dialects, render
from htap.rewrite.pushed import PushedPlan

SHAPES = [(15, 2), (12, 0), (20, 5), (34, 10), (18, 18)]


def _query(dialect: str, table: str, output: str, name: str, p: int, s: int) -> str:
    """AVG(v) of `table` as a plan's one aggregate, its input column named `output` in the plan,
    rendered as the source reader renders it (QueryableSource.render)."""
    plan = PushedPlan.from_dict({"ir": 2, "scans": [{"table": "s.d", "columns": ["v"]}], "root": {
        "node": "aggregate", "group_by": [], "child": {"node": "scan", "scan": 0, "output": [output]},
        "exprs": [{"name": name, "expr": avg_of({"col": output, "type": f"decimal({p},{s})"}, p, s)}]}})
    query = render.render_plan(plan, [render.scan_select(plan.scans[0], exp.to_table(table))])
    return dialects.for_source(query, dialect).sql(dialect)


def avg_query(dialect: str, table: str, p: int, s: int) -> str:
    """A whole subtree's AVG (PlanTranslator): columns named after expression ids."""
    return _query(dialect, table, "c4", "c5", p, s)


def scan_avg_query(dialect: str, table: str, p: int, s: int) -> str:
    """A single table's scan with its AVG pushed complete (HtapScanBuilder): the table's column, agg0."""
    return _query(dialect, table, "v", "agg0", p, s)


QUERIES = {"tree": avg_query, "scan": scan_avg_query}


def average(conn, dialect: str, values: list[Decimal | None], p: int, s: int, form: str = "tree"):
    table = "htap_avg_division"
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (v DECIMAL({p}, {s}))")
        if values:
            cur.executemany(f"INSERT INTO {table} VALUES (%s)", [(None if v is None else format(v, "f"),) for v in values])
        cur.execute(QUERIES[form](dialect, table, p, s))
        return cur.fetchone()[0]


def check(conn, dialect: str, values: list[Decimal | None], p: int, s: int) -> None:
    expected = spark_avg(values, p, s)
    for form in QUERIES:
        got = average(conn, dialect, values, p, s, form)
        assert got == expected and (got is None or got.as_tuple().exponent == -(s + 4)), (dialect, form, values, got, expected)


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
        for form in QUERIES:
            got = average(conn, dialect, decimals, 15, 2, form)
            assert got == (None if expected is None else Decimal(expected)), (dialect, form)


def test_an_ansi_decimal_division_keeps_its_type_on_postgres(pg):
    """Spark's ANSI `/` of decimals raises for a zero divisor: a CASE whose raising branch
    Postgres spells as a DOUBLE division. That branch once made the whole CASE a DOUBLE there,
    and every quotient came back rounded to 17 digits (-6.66666666666666700 for -20 / 3.0;
    fuzz seed 32 query 344). The quotient is Spark's to the last digit; a zero divisor raises."""
    plan = PushedPlan.from_dict({"ir": 2, "scans": [{"table": "s.d", "columns": ["a", "b"]}], "root": {
        "node": "project", "child": {"node": "scan", "scan": 0, "output": ["a", "b"]}, "exprs": [{"name": "q", "expr": {
            "op": "DIV", "type": "decimal(38,17)", "args": [
                {"op": "cast", "type": "decimal(20,0)", "args": [{"col": "a", "type": "bigint"}]},
                {"col": "b", "type": "decimal(18,1)"}]}}]}})
    sql = dialects.for_source(render.render_plan(plan, [render.scan_select(plan.scans[0], exp.to_table("htap_div"))]),
                              "postgres").sql("postgres")
    with pg.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS htap_div")
        cur.execute("CREATE TABLE htap_div (a bigint, b numeric(18,1))")
        cur.execute("INSERT INTO htap_div VALUES (-20, 3.0), (1, 7.0), (7, -0.3)")
        cur.execute(sql)
        assert [r[0] for r in cur.fetchall()] == [
            Decimal("-6.66666666666666667"), Decimal("0.14285714285714286"), Decimal("-23.33333333333333333")]
        cur.execute("INSERT INTO htap_div VALUES (5, 0.0)")
        with pytest.raises(Exception, match="division by zero"):
            cur.execute(sql)
        cur.execute("DROP TABLE htap_div")
