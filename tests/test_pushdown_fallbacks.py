"""Issue 26: pushdown is total — a query Spark can run never fails because of it. A failure while
translating (injected: the translators throw), rendering (injected: the planning-time plan check
answers a rendering failure), or a node or function the translator does not know, leaves that
part of the query to Spark: the answer is Spark's own, on both routes, the fallback is counted
(io.sparkhtap.Fallbacks, the Spark metric htap.pushdownFallbacks), and what can still be pushed
below an unknown node is."""

from __future__ import annotations

import pytest

from conftest import normalized, spark_confs

INJECT = "spark.htap.test.failPushdown"

QUERIES = [
    "SELECT id, name FROM {a} WHERE k < 5 AND name LIKE 'n1%'",
    "SELECT k, count(*), sum(v), avg(v), min(name) FROM {a} WHERE id > 3 GROUP BY k",
    "SELECT id, v FROM {a} ORDER BY v DESC, id LIMIT 7",
    "SELECT a.id, b.w FROM {a} a JOIN {b} b ON a.k = b.k WHERE b.w > 1",
    "SELECT id FROM {a} a WHERE EXISTS (SELECT 1 FROM {b} b WHERE b.k = a.k) OR a.v > 20",
    "SELECT k, sum(v) FROM {a} WHERE k IN (SELECT k FROM {b} WHERE w = 2) GROUP BY k",
    "SELECT id, row_number() OVER (PARTITION BY k ORDER BY id) FROM {a}",
]

# A node (Generate: explode) and a function (soundex) the translator does not know: they stay in
# Spark, and the join below them is still one pushed scan (a DSv2 joined scan or a subtree's).
UNKNOWN = [
    "SELECT x, count(*) FROM (SELECT explode(array(a.k, b.w)) AS x FROM {a} a JOIN {b} b ON a.id = b.id) GROUP BY x",
    "SELECT soundex(a.name), count(*) FROM {a} a JOIN {b} b ON a.k = b.k GROUP BY soundex(a.name)",
]


@pytest.fixture
def tables(workspace):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.a (id int PRIMARY KEY, k int, v numeric(12,2), name text)")
    ws.sql(f"INSERT INTO {s}.a SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE g % 6 END, g * 1.25, 'n' || (g % 13)"
           " FROM generate_series(1, 40) g")
    ws.sql(f"CREATE TABLE {s}.b (id int PRIMARY KEY, k int, w int)")
    ws.sql(f"INSERT INTO {s}.b SELECT g, g % 4, g % 3 FROM generate_series(1, 25) g")
    for t in ("a", "b"):
        ws.htap("tables", "add", f"{s}.{t}")
    ws.start_service()
    for t in ("a", "b"):
        ws.wait_readable(t)
    return s


def fallbacks(spark) -> int:
    return spark._jvm.io.sparkhtap.Fallbacks.count()


def plain_copies(spark, catalog: str, schema: str) -> dict[str, str]:
    """Spark's own tables of the same rows (read once through the catalog, then held in memory)."""
    names = {}
    for t in ("a", "b"):
        df = spark.table(f"{catalog}.{schema}.{t}")
        spark.createDataFrame(df.toPandas(), schema=df.schema).createOrReplaceTempView(f"plain_{t}")
        names[t] = f"plain_{t}"
    return names


def routed(ws, spark, catalog: str, schema: str, route: str) -> tuple[dict[str, str], dict[str, str]]:
    """Spark's own copies of the tables, and the tables' names through the catalog, read on
    `route` (the source's: failover on)."""
    plain = plain_copies(spark, catalog, schema)
    if route == "source":
        for t in ("a", "b"):
            ws.htap("failover", f"{schema}.{t}", "on")
    return plain, {t: f"{catalog}.{schema}.{t}" for t in ("a", "b")}


@pytest.mark.parametrize("route", ["replica", "source"])
def test_injected_failures_leave_the_query_to_spark(workspace, spark, catalog, tables, route):
    plain, names = routed(workspace, spark, catalog, tables, route)
    for stage in ("translate", "render"):
        before = fallbacks(spark)
        with spark_confs(spark, {INJECT: stage}):
            for text in QUERIES:
                q = text.format(**names)
                plan = spark.sql("EXPLAIN " + q).collect()[0][0]
                assert "whole subtree pushed" not in plan and '"agg"' not in plan and '"op"' not in plan, (stage, plan)
                assert normalized(spark.sql(q).collect()) == normalized(spark.sql(text.format(**plain)).collect()), (stage, q)
        assert fallbacks(spark) > before, stage
    for text in QUERIES:  # and without the injection, pushed again, the same answers
        q = text.format(**names)
        assert normalized(spark.sql(q).collect()) == normalized(spark.sql(text.format(**plain)).collect()), q


@pytest.mark.parametrize("route", ["replica", "source"])
def test_unknown_nodes_and_functions_stay_in_spark_and_what_is_below_is_pushed(workspace, spark, catalog, tables, route):
    plain, names = routed(workspace, spark, catalog, tables, route)
    for text in UNKNOWN:
        q = text.format(**names)
        physical = spark.sql("EXPLAIN " + q).collect()[0][0].split("== Physical Plan ==")[-1]
        scans = [line for line in physical.splitlines() if "HtapScan" in line]
        assert len(scans) == 1 and "Join" not in physical, physical
        assert normalized(spark.sql(q).collect()) == normalized(spark.sql(text.format(**plain)).collect()), q


# Filters Spark's own translation to a data source predicate throws on (V2ExpressionBuilder's
# assertion on an AND inside an expression: NULLIF(x, v) with an x v can never equal becomes
# `if(isnull(v) AND null, null, x)`), which
# failed the query before any scan saw it (fuzz seed 25 query 897): left in Spark.
UNTRANSLATABLE = [
    "SELECT id FROM {a} WHERE v < NULLIF(19.755, v)",  # 19.755 never equals a numeric(12,2)
    "SELECT a.id, b.w FROM {a} a JOIN {b} b ON a.k = b.k WHERE a.v < NULLIF(10.001, a.v) AND b.w > 0",
]


@pytest.mark.parametrize("route", ["replica", "source"])
def test_filters_spark_cannot_translate_stay_in_spark(workspace, spark, catalog, tables, route):
    plain, names = routed(workspace, spark, catalog, tables, route)
    for text in UNTRANSLATABLE:
        q = text.format(**names)
        assert "knownnullable(" in spark.sql("EXPLAIN " + q).collect()[0][0], q
        got = normalized(spark.sql(q).collect())
        assert got and got == normalized(spark.sql(text.format(**plain)).collect()), q
