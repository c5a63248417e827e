"""Issue 30: a pushed subtree's aggregate or top-N split by the partitions of its largest table
(io.sparkhtap.SplitSubtree): one task per partition computes a partial aggregate (or its first n
rows) over its partition, every other table read whole in each task — or, joined by the split
table's partition column, only its rows in the partition's key range — and Spark merges them. The
answers are Spark's own (the strategy off) and the one-task plan's, at one snapshot under
concurrent writes; EXPLAIN says when a subtree runs split and why not otherwise.

The shared session runs Spark in local mode, where one task always has every core (the cost
rule never splits: `auto`); the tests force the split (`spark.htap.splitSubtrees=true`) as a
cluster with more task slots than one task's cores would choose it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import psycopg2
import pytest
from test_spark_subtree_pushdown import KEY_QUERIES, keys, tpch, tpch_queries  # noqa: F401 - keys, tpch: fixtures

from conftest import normalized, tune
from services import pg_dsn

SPLIT = "spark.htap.splitSubtrees"
WHOLE = "spark.htap.wholeQueryPushdown"
SPLIT_MARK = "subtree aggregate split"


@contextmanager
def _settings(spark, conf: dict):
    """`conf` set for the block, then each key back to what the session had (unset only if it
    had none: unsetting a setting the session was started with, like the shim's DSv2 join
    pushdown, would change it for every later test of the session)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _rows(spark, query: str, ordered: bool, **conf) -> list:
    with _settings(spark, conf):
        rows = spark.sql(query).collect()
    return [tuple(r) for r in rows] if ordered else normalized(rows)


def _explain(spark, query: str, split: str, **conf) -> str:
    with _settings(spark, {**conf, SPLIT: split}):
        return spark.sql("EXPLAIN " + query).collect()[0][0].split("== Physical Plan ==")[-1]


@pytest.fixture
def partitions(workspace):
    """Partitions of 400 rows for the tables a later fixture adds (listed before it): the suite's
    small TPC-H gets lineitem and orders in several partitions each."""
    tune(workspace, partition_rows=400)


@pytest.fixture
def small_partitions(workspace):
    """Partitions of 16 rows for the tables a later fixture adds (listed before it)."""
    tune(workspace, partition_rows=16)


def test_split_tpch_aggregates_answer_as_spark_and_as_one_task(workspace, partitions, spark, catalog, tpch):
    """Every TPC-H query whose subtree's aggregate splits (where the shape allows): the rows
    plain Spark gives (the strategy off). Q3, Q5 and Q10 (joins under an aggregate, under ORDER
    BY ... LIMIT) run split by lineitem's partitions, orders read by their key ranges; Spark's
    sort and limit stay above the merge. (A query left in one task runs the one-task plan, whose
    rows test_spark_subtree_pushdown compares.)"""
    assert len(workspace.table("lineitem").layout.ids) > 2 and len(workspace.table("orders").layout.ids) > 1
    split, co = [], []
    for n, (q, ordered) in sorted(tpch_queries(catalog, tpch).items()):
        physical = _explain(spark, q, "true")
        if SPLIT_MARK not in physical:
            continue
        split.append(n)
        scan = next(line for line in physical.splitlines() if SPLIT_MARK in line)
        assert '"split":' in scan and '"partial":true' in scan, (n, scan)
        if '"co_split":' in scan:
            co.append(n)
        assert _rows(spark, q, ordered, **{SPLIT: "true"}) == _rows(spark, q, ordered, **{WHOLE: "false"}), n
    assert {3, 5, 10} <= set(split) and {3, 5, 10} <= set(co), (split, co)
    print(f"TPC-H queries whose subtree aggregate ran split: {split}; with a co-partitioned table: {co}")


def test_split_follows_the_rows_only_through_row_wise_operators(workspace, partitions, spark, catalog, tpch):
    """The split table must reach the aggregate through projections, filters and the preserved
    side of joins: an anti join splits by its left side (each left row meets the whole right);
    a LEFT JOIN never by its null-supplying side; a DISTINCT aggregate not at all. EXPLAIN says
    why a subtree stays one task."""
    s = f"{catalog}.{tpch}"
    anti = (f"SELECT o_orderpriority, count(*), sum(o_totalprice), avg(o_totalprice), min(o_orderdate) FROM {s}.orders o"
            f" WHERE NOT EXISTS (SELECT 1 FROM {s}.lineitem l WHERE l.l_orderkey = o.o_orderkey AND l_quantity > 45)"
            " GROUP BY o_orderpriority")
    # (the EXISTS keeps the join out of DSv2's join pushdown: a subtree of the strategy)
    left = (f"SELECT o_orderstatus, count(l_orderkey), sum(l_quantity), max(l_shipdate) FROM {s}.orders o LEFT JOIN"
            f" {s}.lineitem l ON l.l_orderkey = o.o_orderkey AND l_quantity > 30 WHERE EXISTS (SELECT 1 FROM"
            f" {s}.customer c WHERE c.c_custkey = o.o_custkey AND c.c_acctbal > 0) GROUP BY o_orderstatus")
    distinct = (f"SELECT o_orderstatus, count(DISTINCT l_partkey) FROM {s}.orders o JOIN {s}.lineitem l"
                f" ON l.l_orderkey = o.o_orderkey WHERE EXISTS (SELECT 1 FROM {s}.customer c WHERE c.c_custkey = o.o_custkey)"
                " GROUP BY o_orderstatus")
    physical = _explain(spark, anti, "true")
    assert SPLIT_MARK in physical and f"split by the partitions of {s}.orders" in physical, physical
    physical = _explain(spark, left, "true")  # by orders, the preserved side, not the larger lineitem
    assert SPLIT_MARK in physical and f"split by the partitions of {s}.orders" in physical, physical
    # (l_linenumber last: every sort key together is unique, so the order is Spark's alone)
    top = (f"SELECT l_orderkey, l_extendedprice, o_orderdate, l_linenumber FROM {s}.lineitem l JOIN {s}.orders o"
           f" ON l.l_orderkey = o.o_orderkey WHERE EXISTS (SELECT 1 FROM {s}.customer c WHERE c.c_custkey = o.o_custkey"
           " AND c.c_acctbal > 0) ORDER BY l_extendedprice DESC, o_orderdate, l_orderkey, l_linenumber LIMIT 7")
    physical = _explain(spark, top, "true")
    assert "subtree top-N split" in physical and f"split by the partitions of {s}.lineitem" in physical, physical
    assert _rows(spark, top, True, **{SPLIT: "true"}) == _rows(spark, top, True, **{WHOLE: "false"})
    rollup = (f"SELECT o_orderpriority, o_orderstatus, count(*), sum(l_quantity), min(l_discount) FROM {s}.orders o JOIN"
              f" {s}.lineitem l ON l.l_orderkey = o.o_orderkey WHERE EXISTS (SELECT 1 FROM {s}.customer c WHERE"
              " c.c_custkey = o.o_custkey) GROUP BY ROLLUP (o_orderpriority, o_orderstatus)")
    physical = _explain(spark, rollup, "true")  # Spark's Expand: row by row, so the split holds
    assert SPLIT_MARK in physical and f"split by the partitions of {s}.lineitem" in physical, physical
    assert _rows(spark, rollup, False, **{SPLIT: "true"}) == _rows(spark, rollup, False, **{WHOLE: "false"})
    physical = _explain(spark, distinct, "true")
    assert SPLIT_MARK not in physical and "not split: a DISTINCT or FILTER aggregate" in physical, physical
    physical = _explain(spark, anti, "auto")  # local mode: one task has every core
    assert SPLIT_MARK not in physical and "buys no parallelism one task lacks" in physical, physical
    for q in (anti, left, distinct):
        assert _rows(spark, q, False, **{SPLIT: "true"}) == _rows(spark, q, False, **{WHOLE: "false"}), q
    spark.conf.set(SPLIT, "often")  # a wrong value is an error that says the right ones
    try:
        with pytest.raises(Exception, match="splitSubtrees must be auto, true or false"):
            spark.sql(anti).collect()
    finally:
        spark.conf.unset(SPLIT)


# Joins planned by the subtree strategy (not DSv2's join pushdown), every table above Spark's
# broadcast threshold: only co-partitioned tables may join a split table.
BIG_JOINS = {"spark.sql.optimizer.datasourceV2JoinPushdown": "false", "spark.sql.autoBroadcastJoinThreshold": "10"}


def test_split_reads_a_table_joined_by_the_partition_column_by_key_ranges(workspace, partitions, spark, catalog, tpch):
    """lineitem and orders joined by the order key (lineitem's partition column, orders' too),
    both too large to read in every task: the split reads the other table by each task's key
    range — an inner join (orders restricted by its own partitions), a LEFT JOIN split by orders
    (lineitem restricted), an EXISTS (Q4's shape) and a top-N — and answers as plain Spark. A
    table joined by another column stays too large, and EXPLAIN says so."""
    s = f"{catalog}.{tpch}"
    inner = (f"SELECT o_orderpriority, count(*), sum(l_extendedprice), min(l_shipdate), max(o_orderdate) FROM {s}.lineitem l"
             f" JOIN {s}.orders o ON l.l_orderkey = o.o_orderkey AND o_orderdate < l_shipdate GROUP BY o_orderpriority")
    left = (f"SELECT o_orderstatus, count(*), count(l_orderkey), sum(l_quantity) FROM {s}.orders o LEFT JOIN {s}.lineitem l"
            " ON l.l_orderkey = o.o_orderkey AND l_quantity > 30 GROUP BY o_orderstatus")
    exists = (f"SELECT o_orderpriority, count(*) FROM {s}.orders o WHERE o_orderdate >= DATE '1995-01-01' AND EXISTS"
              f" (SELECT 1 FROM {s}.lineitem l WHERE l.l_orderkey = o.o_orderkey AND l_commitdate < l_receiptdate)"
              " GROUP BY o_orderpriority")
    top = (f"SELECT l_orderkey, l_linenumber, l_extendedprice, o_orderdate FROM {s}.lineitem l JOIN {s}.orders o"
           " ON l.l_orderkey = o.o_orderkey ORDER BY l_extendedprice DESC, l_orderkey, l_linenumber LIMIT 5")
    # orders read twice: joined (by key range) and whole in a scalar subquery
    twice = (f"SELECT count(*), sum(l_quantity) FROM {s}.lineitem l JOIN {s}.orders o ON l.l_orderkey = o.o_orderkey"
             f" WHERE o_totalprice > (SELECT avg(o_totalprice) FROM {s}.orders)")
    cases = [(inner, "lineitem", "orders by o_orderkey", False), (left, "orders", "lineitem by l_orderkey", False),
             (exists, "orders", "lineitem by l_orderkey", False), (top, "lineitem", "orders by o_orderkey", True),
             (twice, "lineitem", "orders by o_orderkey", False)]
    for q, split, by, ordered in cases:
        # (the subquery's orders is read whole in every task: under the default threshold)
        conf = {**BIG_JOINS, "spark.sql.autoBroadcastJoinThreshold": "10485760"} if q is twice else BIG_JOINS
        physical = _explain(spark, q, "true", **conf)
        assert f"split by the partitions of {s}.{split}" in physical, physical
        assert f"read by its partitions' key ranges: {s}.{by}" in physical, physical
        scan = next(line for line in physical.splitlines() if "co_split" in line)
        assert '"co_split":[[' in scan, scan
        split_rows = _rows(spark, q, ordered, **{SPLIT: "true"}, **conf)
        assert split_rows == _rows(spark, q, ordered, **{WHOLE: "false"}), q
    other = (f"SELECT p_brand, count(*), sum(l_quantity) FROM {s}.lineitem l JOIN {s}.part p ON l.l_partkey = p.p_partkey"
             " GROUP BY p_brand")
    physical = _explain(spark, other, "true", **BIG_JOINS)
    assert SPLIT_MARK not in physical and "too large to read in every task (and not joined by" in physical, physical


def test_split_null_semantics_agree_with_spark(workspace, small_partitions, spark, catalog, keys):
    """IN / NOT IN / EXISTS over NULL keys (issue 12's queries), split wherever the shape allows."""
    names = {t: f"{catalog}.{keys}.{t}" for t in ("a", "b", "c")}
    split = 0
    for text in KEY_QUERIES:
        q = text.format(**names)
        split += SPLIT_MARK in _explain(spark, q, "true")
        assert _rows(spark, q, False, **{SPLIT: "true"}) == _rows(spark, q, False, **{WHOLE: "false"}), q
    assert split >= 2, split
    # A split scan pruned to no partition (fuzz seed 46 query 1715): still one task, whose
    # partial aggregate row Spark's final aggregate needs (COUNT 0, not NULL), and no rows else.
    for q in (f"SELECT count(*), sum(v), max(name) FROM {names['a']} WHERE id BETWEEN 50 AND 10",
              f"SELECT id, k FROM {names['a']} WHERE id BETWEEN 50 AND 10"):
        split = {SPLIT: "true", "spark.htap.splitTableScans": "true"}
        assert _rows(spark, q, False, **split) == _rows(spark, q, False, **{WHOLE: "false"}), q


def test_split_tasks_read_one_snapshot_under_writes(workspace, spark, catalog):
    """Transfers between accounts, and between savings, keep their sums 0; a split
    aggregate over accounts joined with their branches (read whole), and over accounts joined
    with their savings (co-partitioned by id), must see 0 at every read (each task reads its
    partition at the query's one seq), while a writer commits transfers and the service
    checkpoints."""
    ws = workspace
    tune(ws, partition_rows=50)
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.bra (id int PRIMARY KEY, region int NOT NULL)")
    ws.sql(f"INSERT INTO {s}.bra SELECT g, g % 2 FROM generate_series(1, 4) g")
    ws.sql(f"CREATE TABLE {s}.acc (id int PRIMARY KEY, bid int NOT NULL, balance bigint NOT NULL)")
    ws.sql(f"INSERT INTO {s}.acc SELECT g, g % 4 + 1, 0 FROM generate_series(1, 400) g")
    ws.sql(f"CREATE TABLE {s}.sav (id int PRIMARY KEY, balance bigint NOT NULL)")
    ws.sql(f"INSERT INTO {s}.sav SELECT g, 0 FROM generate_series(1, 400) g")
    for t in ("bra", "acc", "sav"):
        ws.htap("tables", "add", f"{s}.{t}")
    ws.start_service()
    for t in ("bra", "acc", "sav"):
        ws.wait_readable(t)
    assert len(ws.table("acc").layout.ids) > 2
    # (the EXISTS keeps the join out of DSv2's join pushdown: a subtree of the strategy)
    q = (f"SELECT b.region, count(*), sum(a.balance) FROM {catalog}.{s}.acc a JOIN {catalog}.{s}.bra b ON a.bid = b.id"
         f" WHERE EXISTS (SELECT 1 FROM {catalog}.{s}.bra x WHERE x.id = a.bid) GROUP BY b.region")
    assert SPLIT_MARK in _explain(spark, q, "true")
    # Co-partitioned: each task reads the savings of its accounts' key range, at the same seq.
    both = (f"SELECT count(*), sum(a.balance + v.balance) FROM {catalog}.{s}.acc a"
            f" JOIN {catalog}.{s}.sav v ON a.id = v.id")
    assert "read by its partitions' key ranges" in _explain(spark, both, "true", **BIG_JOINS)

    stop = threading.Event()
    written = []

    def writer():
        conn = psycopg2.connect(pg_dsn())
        cur = conn.cursor()
        i = 0
        while not stop.is_set():
            a, b = i * 7 % 400 + 1, i * 13 % 400 + 1
            if a != b:
                cur.execute(f"UPDATE {s}.acc SET balance = balance - 5 WHERE id = %s", (a,))
                cur.execute(f"UPDATE {s}.acc SET balance = balance + 5 WHERE id = %s", (b,))
                conn.commit()
                cur.execute(f"UPDATE {s}.sav SET balance = balance - 3 WHERE id = %s", (b,))
                cur.execute(f"UPDATE {s}.sav SET balance = balance + 3 WHERE id = %s", (a,))
                conn.commit()
            i += 1
        written.append(i)
        conn.close()

    w = threading.Thread(target=writer)
    w.start()
    try:
        for _ in range(12):
            rows = _rows(spark, q, False, **{SPLIT: "true"})
            assert [r[1] for r in rows] == [200, 200], rows
            assert sum(r[2] for r in rows) == 0, rows
            assert _rows(spark, both, False, **{SPLIT: "true"}, **BIG_JOINS) == [(400, 0)]
    finally:
        stop.set()
        w.join()
    assert written and written[0] > 0
