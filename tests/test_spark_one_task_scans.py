"""Issue 12 item 3: a single table's scan with a pushed aggregate, top-N or limit reads all its
partitions in one task when one task per partition buys no parallelism (local mode: always), so
what it returns is final and Spark plans no exchange, final aggregate or sort of its own. An AVG
of a decimal(p, s) with 11 < p <= 28 is computed whole by the reader, Spark's exact value (TPC-H
Q1's shape); any other AVG is split by Spark into partial sums and counts the scan computes and a
final division above them, which the whole-subtree strategy takes into the same one task where it
translates them. `spark.htap.splitTableScans=true` keeps one task per partition (as on a cluster
with more task slots than one task's cores). The answers are Spark's own over a plain copy either
way, on the replica and on failover."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from decimal_support import spark_avg, unscaled_decimals
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import complete_aggregate, normalized, pushed_plans, spark_confs, top_aggregate, tune

SPLIT = "spark.htap.splitTableScans"

# (query, ordered, aggregate): ordered queries are compared row by row (unique ORDER BY keys);
# aggregate: "complete" in one task, "partial" (an AVG Spark finishes), "subtree" (an AVG Spark
# finishes inside a pushed subtree), or None (no aggregate).
QUERIES = [
    ("SELECT grp, count(*), sum(price), min(d), max(disc), count(DISTINCT disc) FROM {t} GROUP BY grp", False, "complete"),
    ("SELECT count(*), sum(price * (1 - disc)) FROM {t} WHERE d >= date '2024-02-01'", False, "complete"),
    ("SELECT count(*), sum(price) FROM {t} WHERE id < 0", False, "complete"),  # no row: a global aggregate's one row
    ("SELECT count(*), max(price) FROM {t} WHERE id BETWEEN 10 AND 40", False, "complete"),  # key filter prunes partitions
    # Spark offers a data source any COUNT(constant) as COUNT(*) (CountOfConstant keeps these exact).
    ("SELECT grp, count(DISTINCT 5), count(NULL), count(DISTINCT NULL), count(7) FROM {t} GROUP BY grp", False, "complete"),
    ("SELECT count(DISTINCT 'x'), count(*) FROM {t} WHERE id < 0", False, "complete"),
    ("SELECT id, price FROM {t} ORDER BY price DESC, id LIMIT 7", True, None),
    ("SELECT grp, sum(price) AS s FROM {t} GROUP BY grp ORDER BY s DESC LIMIT 2", True, "complete"),
    ("SELECT d FROM {t} ORDER BY disc, id LIMIT 5", True, None),  # a sort key that is not an output
    # price numeric(12,2): its AVG complete in the scan; ORDER BY without LIMIT (TPC-H Q1's shape):
    # Spark's sort of the one-task scan goes into it too (a one-leaf tree, HtapSubtreeStrategy).
    ("SELECT grp, avg(price), count(*) FROM {t} GROUP BY grp", False, "complete"),
    ("SELECT grp, sum(price), avg(price), avg(price * (1 - disc)), count(*) FROM {t} WHERE d <= date '2024-09-01'"
     " GROUP BY grp ORDER BY grp", True, "complete"),
    ("SELECT grp, avg(price) AS a FROM {t} GROUP BY grp ORDER BY a DESC LIMIT 2", True, "complete"),
    # AVG of an integer (a DOUBLE sum) and of a decimal(4,2) (p <= 11: Spark's DecimalAggregates
    # averages it in DOUBLE): Spark's own AVG over partial sums and counts. Of the integer, a
    # "subtree": Spark's final AVG and the scan in one pushed subtree, one task (unless split);
    # the decimal's UnscaledValue is not translated, so Spark finishes it.
    ("SELECT grp, avg(id), count(*) FROM {t} GROUP BY grp", False, "subtree"),
    ("SELECT grp, avg(disc), sum(price) FROM {t} GROUP BY grp", False, "partial"),
    # AVG of NULL beside one Spark finishes: Spark's pushdown split it into SUM(NULL) and a
    # COUNT(NULL) it offered as COUNT(*), and ANSI took the NULL sum of a non-zero count for an
    # overflow (fuzz seed 27 query 22); CountOfConstant makes it the NULL it is.
    ("SELECT grp, avg(disc), avg(CAST(NULL AS DECIMAL(12,2))), sum(price) FROM {t} GROUP BY grp", False, "partial"),
]


@pytest.fixture
def parts(workspace):
    ws = workspace
    tune(ws, partition_rows=100)
    t = f"{ws.schema}.parts"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, grp text NOT NULL, price numeric(12,2), disc numeric(4,2), d date)")
    ws.sql(
        f"INSERT INTO {t} SELECT g, 'g' || (g % 4), g * 1.25, (g % 10) / 100.0, date '2024-01-01' + g % 300"
        " FROM generate_series(1, 600) g"
    )
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("parts")
    assert len(ws.table("parts").layout.ids) > 2
    return t


def _rows(spark, query: str, ordered: bool):
    rows = spark.sql(query).collect()
    return [tuple(r) for r in rows] if ordered else normalized(rows)


@pytest.mark.parametrize("route", ["replica", "source"])
def test_a_tables_aggregate_and_top_n_run_in_one_task_and_are_final(workspace, spark, catalog, parts, route):
    ws = workspace
    if route == "source":
        ws.htap("failover", parts, "on")
    t = f"{catalog}.{parts}"
    plain = spark.createDataFrame(spark.table(t).toPandas(), schema=spark.table(t).schema)
    plain.createOrReplaceTempView("parts_plain")
    try:
        for mode in ("auto", "true"):
            with spark_confs(spark, {SPLIT: mode}):
                for text, ordered, aggregate in QUERIES:
                    q = text.format(t=t)
                    plan = spark.sql("EXPLAIN " + q).collect()[0][0]
                    if mode == "auto" and aggregate == "subtree":
                        # Spark's final AVG over the scan's partial sums and counts: one subtree.
                        assert "whole subtree pushed" in plan and "HashAggregate" not in plan, plan
                        assert pushed_plans(plan)[0].one_task, plan
                    elif mode == "auto" and aggregate != "partial":
                        assert "one task" in plan and "Exchange" not in plan and "TakeOrdered" not in plan, plan
                        assert pushed_plans(plan)[0].one_task, plan
                        if aggregate:
                            assert "aggregate complete in the scan" in plan and "HashAggregate" not in plan, plan
                    else:
                        (scan,) = pushed_plans(plan)
                        assert not scan.one_task and not complete_aggregate(scan), plan
                        assert aggregate not in ("partial", "subtree") or top_aggregate(scan).partial, plan
                        if aggregate:  # Spark aggregates (COUNT(DISTINCT) is not pushed as partial)
                            assert "HashAggregate" in plan, plan
                        if aggregate in ("partial", "subtree"):
                            assert "partial aggregate" in plan, plan
                    got = _rows(spark, q, ordered)
                    with ws.store() as store:
                        assert store.recent_scans(ws.table("parts").id, 1)[0].route == route
                    assert got == _rows(spark, text.format(t="parts_plain"), ordered), (mode, q)
        rows = spark.sql(f"SELECT 1 FROM {t} LIMIT 3").collect()
        assert [tuple(r) for r in rows] == [(1,)] * 3
    finally:
        spark.catalog.dropTempView("parts_plain")


def test_a_wrong_split_value_says_the_right_ones(workspace, spark, catalog, parts):
    with spark_confs(spark, {SPLIT: "sometimes"}):
        with pytest.raises(Exception, match="splitTableScans must be auto, true or false"):
            spark.sql(f"SELECT count(*) FROM {catalog}.{parts}").collect()


# --- AVG of decimals, complete in one task ---------------------------------------------------------


@pytest.fixture
def averages(workspace):
    """A table of several partitions whose decimal(15,2) averages per group fall on, just below
    and just above a tie at the result's scale (6 digits), on both sides of zero; NULLs, a group
    of NULLs only, the largest decimal(15,2) values, and filler rows spread over the partitions."""
    ws = workspace
    tune(ws, partition_rows=100)
    t = f"{ws.schema}.avgs"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, g int, x numeric(15,2), z numeric(28,3))")
    rows = [(1, "0.01")] + [(1, "0.00")] * 31 + [(2, "-0.01")] + [(2, "0.00")] * 31  # 0.0003125: ties
    rows += [(3, "-0.01")] + [(3, "0.00")] * 63  # -0.00015625: -0.000156
    rows += [(4, "0.02"), (4, "0.00"), (4, "0.00"), (4, "-123.45"), (4, "77.77"), (4, "0.01")]
    rows += [(5, None), (5, "5.55"), (5, None)]
    rows += [(6, "9999999999999.99"), (6, "9999999999999.99"), (6, "9999999999999.97")]
    rows += [(8, None), (8, None)]  # NULLs only: AVG NULL
    rows += [(9, f"{(i * 7919) % 20011 - 10005}.{i % 100:02d}") for i in range(400)]
    values = ", ".join(f"({i}, {g}, {'NULL' if x is None else x}, {'NULL' if x is None else x})"
                       for i, (g, x) in enumerate(rows, start=1))
    ws.sql(f"INSERT INTO {t} VALUES {values}")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("avgs")
    assert len(ws.table("avgs").layout.ids) > 2
    return t


AVERAGE_QUERIES = [  # (query, ordered)
    ("SELECT g, avg(x), count(x), sum(x), avg(z) FROM {t} GROUP BY g", False),
    ("SELECT avg(x), avg(z), count(*) FROM {t}", False),
    ("SELECT avg(x), count(*) FROM {t} WHERE id < 0", False),  # no rows: NULL
    ("SELECT avg(x) FROM {t} WHERE g = 8", False),  # only NULLs: NULL
    ("SELECT g, avg(x * 2 - x) FROM {t} WHERE g <> 6 GROUP BY g", False),  # over an expression, decimal(18,2)
    ("SELECT g, avg(x) AS a, avg(z) FROM {t} GROUP BY g ORDER BY g", True),  # sorted (one-leaf tree)
    ("SELECT g, avg(x) AS a FROM {t} GROUP BY g ORDER BY a DESC NULLS LAST LIMIT 3", True),  # top-N by the AVG
]


def _plan(spark, q: str) -> str:
    return spark.sql("EXPLAIN " + q).collect()[0][0]


def _spark_ops(plan: str) -> list[str]:
    """The plan's lines other than the scan's own (whose description names operators too)."""
    return [line for line in plan.splitlines() if "HtapScan" not in line]


@pytest.mark.parametrize("route", ["replica", "source"])
def test_a_tables_avg_of_decimals_is_complete_in_one_task_and_sparks_own(workspace, spark, catalog, averages, route):
    """AVG of decimals pushed whole into a single table's one-task scan: no Spark aggregate above
    the scan, and Spark's own value and type to the last digit (a plain DataFrame copy, and the
    same query split by partitions, where Spark finishes the AVG): ties away from zero on both
    sides, NULL-only groups, no rows, the largest values, an expression, sorted and top-N."""
    ws = workspace
    if route == "source":
        ws.htap("failover", averages, "on")
    t = f"{catalog}.{averages}"
    plain = spark.createDataFrame(spark.table(t).toPandas(), schema=spark.table(t).schema)
    plain.createOrReplaceTempView("avgs_plain")
    try:
        for text, ordered in AVERAGE_QUERIES:
            q = text.format(t=t)
            plan = _plan(spark, q)
            assert "aggregate complete in the scan" in plan and '"op":"/"' in plan, plan  # Spark's AVG: sum / count
            assert not [op for op in _spark_ops(plan) if any(x in op for x in ("HashAggregate", "Exchange", "Sort ["))], plan
            got = spark.sql(q)
            rows = [tuple(r) for r in got.collect()]
            with ws.store() as store:
                assert store.recent_scans(ws.table("avgs").id, 1)[0].route == route
            own = spark.sql(text.format(t="avgs_plain"))
            assert got.schema == own.schema, q
            assert (rows if ordered else normalized(rows)) == (
                [tuple(r) for r in own.collect()] if ordered else normalized(own.collect())), q
            with spark_confs(spark, {SPLIT: "true"}):  # the old shape: Spark's AVG over partial sums
                split = _plan(spark, q)
                assert "HashAggregate" in split and '"op":"/"' not in split, split
                again = [tuple(r) for r in spark.sql(q).collect()]
            assert (again if ordered else normalized(again)) == (rows if ordered else normalized(rows)), q
        by_group = {r[0]: r[1] for r in spark.sql(AVERAGE_QUERIES[0][0].format(t=t)).collect()}
        assert by_group[1] == Decimal("0.000313") and by_group[2] == Decimal("-0.000313"), by_group
        assert by_group[3] == Decimal("-0.000156") and by_group[8] is None, by_group
        assert by_group[6] == Decimal("9999999999999.983333"), by_group
    finally:
        spark.catalog.dropTempView("avgs_plain")


@pytest.mark.parametrize("route", ["replica", "source"])
def test_random_decimal_averages_pushed_whole_are_sparks_own(workspace, spark, catalog, route):
    """Property: random decimals (ties and extremes often, NULLs, empty batches) averaged by the
    pushed scan, per group and overall, equal Spark's own AVG over the same values in a plain
    DataFrame, and Spark's steps (tests/decimal_support.py)."""
    from pyspark.sql.types import DecimalType, IntegerType, StructField, StructType

    ws = workspace
    tune(ws, partition_rows=100)
    t = f"{ws.schema}.rand"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, b int, g int, x numeric(15,2), y numeric(20,5))")
    ws.sql(f"INSERT INTO {t} SELECT i, -1, i % 4, i * 1.25, i * 0.00001 FROM generate_series(1, 300) i")  # partitions
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("rand")
    if route == "source":
        ws.htap("failover", t, "on")
    schema = StructType([StructField("g", IntegerType()), StructField("x", DecimalType(15, 2)),
                         StructField("y", DecimalType(20, 5))])
    ids = itertools.count(1000)
    batches = itertools.count(1)
    row = st.tuples(st.integers(0, 2), st.one_of(st.none(), unscaled_decimals(15, 2)),
                    st.one_of(st.none(), unscaled_decimals(20, 5)))

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(rows=st.lists(row, max_size=12))
    def check(rows):
        b = next(batches)
        if rows:
            values = ", ".join(f"({next(ids)}, {b}, {g}, {'NULL' if x is None else x}, {'NULL' if y is None else y})"
                               for g, x, y in rows)
            ws.sql(f"INSERT INTO {t} VALUES {values}")
        if route == "replica":
            ws.wait_caught_up("rand")
        spark.createDataFrame(rows, schema=schema).createOrReplaceTempView("rand_plain")
        for text in ("SELECT g, avg(x), avg(y), count(*) FROM {t} {w} GROUP BY g", "SELECT avg(x), avg(y) FROM {t} {w}"):
            q = text.format(t=f"{catalog}.{t}", w=f"WHERE b = {b}")
            plan = _plan(spark, q)
            assert "aggregate complete in the scan" in plan and "HashAggregate" not in plan, plan
            got = normalized(spark.sql(q).collect())
            assert got == normalized(spark.sql(text.format(t="rand_plain", w="")).collect()), (q, rows)
        overall = spark.sql(f"SELECT avg(x), avg(y) FROM {catalog}.{t} WHERE b = {b}").collect()[0]
        assert tuple(overall) == (spark_avg([x for _, x, _ in rows], 15, 2), spark_avg([y for _, _, y in rows], 20, 5))

    try:
        check()
    finally:
        spark.catalog.dropTempView("rand_plain")
