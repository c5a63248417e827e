"""Issue 12, runtime filters: Spark's dynamic partition pruning reaches HTAP scans.

A single table's row scan reports its columns as runtime-filterable (HtapScan, Spark's
`SupportsRuntimeV2Filtering`). When Spark broadcasts the other side of a join, it hands the scan
that side's join keys before the scan's partitions are planned: an IN on the first key column
prunes the table's partitions by key range, and every runtime filter runs in the partition reads,
so the scan returns only rows that can join. Exact on both routes: the same rows as with pruning
off; the scan's own output row count (Spark's `numOutputRows`) shows the pruning happened."""

from __future__ import annotations

import pytest

from conftest import normalized, spark_confs

DPP = "spark.sql.optimizer.dynamicPartitionPruning.enabled"


@pytest.fixture
def orders(workspace):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.orders (id int PRIMARY KEY, customer int, total numeric(12,2), note text)")
    ws.sql(f"INSERT INTO {s}.orders SELECT g, g % 97, g * 1.25, 'n' || (g % 5) FROM generate_series(1, 20000) g")
    ws.htap("tables", "add", f"{s}.orders")
    ws.start_service()
    ws.wait_readable("orders")
    ws.sql(f"UPDATE {s}.orders SET total = total + 1 WHERE id % 10 = 0")  # deltas beside the copy
    ws.sql(f"DELETE FROM {s}.orders WHERE id % 13 = 0")
    ws.wait_caught_up("orders")
    return s


def scan_rows(df) -> tuple[list, list[int]]:
    """The query's rows, and each BatchScan's output row count in the plan Spark ran."""
    rows = df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    counts = []

    def walk(p):
        if p.nodeName().startswith("BatchScan"):
            counts.append(p.metrics().apply("numOutputRows").value())
        if "QueryStage" in p.nodeName():
            return walk(p.plan())
        children = p.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(plan)
    return rows, counts


@pytest.mark.parametrize("route", ["replica", "source"])
def test_a_broadcast_join_prunes_the_htap_scan_at_run_time(workspace, spark, catalog, orders, route):
    ws = workspace
    if route == "source":
        ws.htap("failover", f"{orders}.orders", "on")
    picked = [(k, "a" if k % 3 else "b") for k in list(range(1, 40)) + [5000, 5001, 5003, 19999, 20000, 20001]]
    spark.createDataFrame(picked, "id int, tag string").createOrReplaceTempView("picked")
    q = (f"SELECT /*+ BROADCAST(p) */ o.id, o.customer, o.total, o.note FROM {catalog}.{orders}.orders o"
         " JOIN picked p ON o.id = p.id WHERE p.tag = 'a'")
    plan = spark.sql("EXPLAIN " + q).collect()[0][0]
    assert "dynamicpruning" in plan, plan
    with spark_confs(spark, {DPP: "true"}):
        pruned, pruned_counts = scan_rows(spark.sql(q))
    with spark_confs(spark, {DPP: "false"}):
        whole, whole_counts = scan_rows(spark.sql(q))
    assert pruned, "the join returns no row: the comparison would prove nothing"
    assert normalized(pruned) == normalized(whole)
    want = ws.sql(f"SELECT id, customer, total, note FROM {orders}.orders WHERE id = ANY(%s)",
                  ([k for k, tag in picked if tag == "a"],))
    assert normalized(pruned) == normalized(want)
    (scanned,), (all_rows,) = pruned_counts, whole_counts
    assert scanned == len(want) and all_rows > 10 * scanned, (pruned_counts, whole_counts)


@pytest.mark.parametrize("route", ["replica", "source"])
def test_a_runtime_filter_of_many_keys_reads_their_range(workspace, spark, catalog, orders, route):
    """More than 1,000 keys (HtapScan.MAX_RUNTIME_VALUES) are too many to send as an IN: the scan
    reads the range from their least to their greatest key, and the join keeps the exact rows."""
    ws = workspace
    if route == "source":
        ws.htap("failover", f"{orders}.orders", "on")
    keys = list(range(3000, 6000, 2))  # 1,500
    picked = [(k, "a") for k in keys] + [(k, "b") for k in (1, 19999)]
    spark.createDataFrame(picked, "id int, tag string").createOrReplaceTempView("many")
    q = (f"SELECT /*+ BROADCAST(p) */ o.id, o.customer, o.total, o.note FROM {catalog}.{orders}.orders o"
         " JOIN many p ON o.id = p.id WHERE p.tag = 'a'")  # Spark prunes only by a side that filters
    assert "dynamicpruning" in spark.sql("EXPLAIN " + q).collect()[0][0]
    with spark_confs(spark, {DPP: "true"}):
        pruned, (scanned,) = scan_rows(spark.sql(q))
    want = ws.sql(f"SELECT id, customer, total, note FROM {orders}.orders WHERE id = ANY(%s)", (keys,))
    assert pruned and normalized(pruned) == normalized(want)
    (in_range,) = ws.sql(f"SELECT count(*) FROM {orders}.orders WHERE id BETWEEN 3000 AND 5998")[0]
    assert scanned == in_range, (scanned, in_range)  # the range, not the table (about 18,000 rows)
