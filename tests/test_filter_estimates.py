"""Issue 30 item 2: a scan's row and byte estimates see its pushed filter (io.sparkhtap.FilterEstimate
over the deltas' column statistics, htap.replica.column_stats). What Spark's optimizer gets for a
filtered HTAP scan is about the rows the filter keeps — so a filtered large table joins as a
broadcast where the whole table would not — and the split rules weigh the bytes a scan reads.
Answers never depend on estimates: the queries here equal plain Spark's over the same rows."""

from __future__ import annotations

import pytest

from conftest import normalized, spark_confs, tune

ROWS = 20_000
ESTIMATES = "spark.htap.filterEstimates"


@pytest.fixture
def facts(workspace):
    """20,000 rows: k 1..20000 (the key), d a date over 400 days, g one of 50 groups, n null in
    every fourth row, s one of 7 strings."""
    ws = workspace
    tune(ws, partition_rows=5000)
    t = f"{ws.schema}.facts"
    ws.sql(f"CREATE TABLE {t} (k int PRIMARY KEY, d date NOT NULL, g int NOT NULL, n numeric(10,2), s text NOT NULL,"
           " pad text NOT NULL)")
    ws.sql(f"INSERT INTO {t} SELECT x, date '2024-01-01' + x % 400, x % 50, CASE WHEN x % 4 = 0 THEN NULL"
           f" ELSE x * 0.5 END, 's' || (x % 7), repeat('p', 40) FROM generate_series(1, {ROWS}) x")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("facts")
    return t


def _rows_estimate(spark, query: str) -> int:
    """The row count the HTAP scan (the plan's one leaf) reports to Spark (estimateStatistics;
    Spark's plan statistics keep it only with its cost-based optimizer on)."""
    leaf = spark.sql(query)._jdf.queryExecution().optimizedPlan().collectLeaves().head()
    rows = leaf.scan().estimateStatistics().numRows()
    assert rows.isPresent(), query
    return rows.getAsLong()


def _bytes_estimate(spark, query: str) -> int:
    return int(str(spark.sql(query)._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


# (filter, rows it keeps of the 20,000): each estimate within a factor of 1.5 of the truth.
FILTERS = [
    ("k <= 2000", 2000),
    ("k > 15000", 5000),
    ("k BETWEEN 5001 AND 6000", 1000),
    ("d < date '2024-03-11'", 70 * 50),  # 70 of the 400 days
    ("g = 7", 400),
    ("g IN (1, 2, 3, 4)", 1600),
    ("n IS NULL", 5000),
    ("n IS NOT NULL AND k <= 4000", 3000),
    ("s = 's3'", ROWS // 7),
    ("g = 7 OR g = 8", 800),
    ("NOT (g = 7)", ROWS - 400),
]


def test_a_filtered_scans_row_estimate_is_about_the_rows_it_keeps(workspace, spark, catalog, facts):
    t = f"{catalog}.{facts}"
    whole = _rows_estimate(spark, f"SELECT * FROM {t}")
    assert whole == ROWS
    for condition, kept in FILTERS:
        q = f"SELECT k, d FROM {t} WHERE {condition}"
        estimate = _rows_estimate(spark, q)
        assert kept / 1.5 <= estimate <= kept * 1.5, (condition, estimate, kept)
        assert spark.sql(f"SELECT count(*) FROM {t} WHERE {condition}").collect()[0][0] == kept, condition
    # What no statistic tells keeps every row: never a lower guess.
    assert _rows_estimate(spark, f"SELECT k FROM {t} WHERE s LIKE '%3%'") == ROWS
    # Off: the whole table's.
    with spark_confs(spark, {ESTIMATES: "false"}):
        assert _rows_estimate(spark, f"SELECT k FROM {t} WHERE k <= 2000") == ROWS
    with spark_confs(spark, {ESTIMATES: "maybe"}):
        with pytest.raises(Exception, match="filterEstimates must be true or false"):
            spark.sql(f"SELECT k FROM {t} WHERE k <= 2000").collect()


def test_a_filtered_large_table_is_broadcast_in_a_join_and_answers_the_same(workspace, spark, catalog, facts):
    """With the broadcast threshold between the filtered table's size and the whole table's,
    Spark broadcasts the filtered side (estimates on) or shuffles both (off); the rows agree with
    plain Spark's over copies of both tables."""
    t = f"{catalog}.{facts}"
    q = (f"SELECT f.k, f.pad, x.g FROM {t} f JOIN (SELECT g, count(*) AS c FROM {t} GROUP BY g) x"
         f" ON f.g = x.g WHERE f.k <= 200")
    filtered = _bytes_estimate(spark, f"SELECT k, pad, g FROM {t} WHERE k <= 200")
    whole = _bytes_estimate(spark, f"SELECT k, pad, g FROM {t}")
    assert filtered * 20 < whole, (filtered, whole)
    threshold = str((filtered + whole) // 8)
    plans, answers = {}, {}
    for on in ("true", "false"):
        with spark_confs(spark, {ESTIMATES: on, "spark.sql.autoBroadcastJoinThreshold": threshold,
                                 "spark.sql.adaptive.enabled": "false", "spark.htap.wholeQueryPushdown": "false"}):
            plans[on] = spark.sql("EXPLAIN " + q).collect()[0][0]
            answers[on] = normalized(spark.sql(q).collect())
    assert "BroadcastHashJoin" in plans["true"], plans["true"]
    assert "BroadcastHashJoin" not in plans["false"], plans["false"]
    plain = spark.createDataFrame(spark.table(t).toPandas(), schema=spark.table(t).schema)
    plain.createOrReplaceTempView("facts_plain")
    try:
        expected = normalized(spark.sql(q.replace(t, "facts_plain")).collect())
    finally:
        spark.catalog.dropTempView("facts_plain")
    assert answers["true"] == answers["false"] == expected and len(expected) == 200
