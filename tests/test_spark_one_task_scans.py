"""Issue 12 item 3: a single table's scan with a pushed aggregate, top-N or limit reads all its
partitions in one task when one task per partition buys no parallelism (local mode: always), so
what it returns is final and Spark plans no exchange, final aggregate or sort of its own (AVG
excepted: Spark finishes it from partial sums and counts, per partition as before).
`spark.htap.splitTableScans=true` keeps one task per partition (as on a cluster with more task
slots than one task's cores). The answers are Spark's own over a plain copy either way, on the
replica and on failover."""

from __future__ import annotations

import pytest

from conftest import normalized, spark_confs, tune

SPLIT = "spark.htap.splitTableScans"

# (query, ordered, aggregate): ordered queries are compared row by row (unique ORDER BY keys);
# aggregate: "complete" in one task, "partial" (AVG: Spark finishes it), or None (no aggregate).
QUERIES = [
    ("SELECT grp, count(*), sum(price), min(d), max(disc), count(DISTINCT disc) FROM {t} GROUP BY grp", False, "complete"),
    ("SELECT count(*), sum(price * (1 - disc)) FROM {t} WHERE d >= date '2024-02-01'", False, "complete"),
    ("SELECT count(*), sum(price) FROM {t} WHERE id < 0", False, "complete"),  # no row: a global aggregate's one row
    ("SELECT count(*), max(price) FROM {t} WHERE id BETWEEN 10 AND 40", False, "complete"),  # key filter prunes partitions
    ("SELECT id, price FROM {t} ORDER BY price DESC, id LIMIT 7", True, None),
    ("SELECT grp, sum(price) AS s FROM {t} GROUP BY grp ORDER BY s DESC LIMIT 2", True, "complete"),
    ("SELECT d FROM {t} ORDER BY disc, id LIMIT 5", True, None),  # a sort key that is not an output
    ("SELECT grp, avg(price), count(*) FROM {t} GROUP BY grp", False, "partial"),
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
                    if mode == "auto" and aggregate != "partial":
                        assert "one task" in plan and "Exchange" not in plan and "TakeOrdered" not in plan, plan
                        assert '"one_task":true' in plan, plan
                        if aggregate:
                            assert "aggregate complete in the scan" in plan and "HashAggregate" not in plan, plan
                    else:
                        assert '"one_task"' not in plan and '"complete"' not in plan, plan
                        if aggregate:  # Spark aggregates (COUNT(DISTINCT) is not pushed as partial)
                            assert "HashAggregate" in plan, plan
                        if aggregate == "partial":
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
