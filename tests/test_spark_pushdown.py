"""Issue 12: what Spark pushes into HTAP scans, and how routing behaves — through spark.sql only."""

from __future__ import annotations

import pytest

from conftest import complete_aggregate, normalized, pushed_plans, spark_confs, top_aggregate, wait_until


@pytest.fixture
def items(workspace):
    ws = workspace
    t = f"{ws.schema}.items"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, grp text NOT NULL, price numeric(12,2), disc numeric(4,2), d date)")
    ws.sql(
        f"INSERT INTO {t} SELECT g, 'g' || (g % 4), g * 1.25, (g % 10) / 100.0, date '2024-01-01' + g"
        " FROM generate_series(1, 200) g"
    )
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("items")
    return t


def last_scan(ws, name="items"):
    with ws.store() as store:
        return store.recent_scans(ws.table(name).id, 1)[0]


def test_queries_that_need_no_column_read_the_replica(workspace, spark, catalog, items):
    ws = workspace
    t = f"{catalog}.{items}"
    assert spark.sql(f"SELECT 1 FROM {t} LIMIT 1").collect()[0][0] == 1
    assert last_scan(ws).route == "replica"
    assert spark.sql(f"SELECT count(*) FROM (SELECT * FROM {t} UNION ALL SELECT * FROM {t})").collect()[0][0] == 400
    assert spark.sql(f"SELECT count(*) FROM (SELECT id FROM {t} UNION ALL SELECT 1 FROM {t})").collect()[0][0] == 400
    assert ws.table("items").state == "streaming"
    assert last_scan(ws).route == "replica"


def test_no_column_queries_on_the_source_route_and_health_left_alone(workspace, spark, catalog, items):
    ws = workspace
    t = f"{catalog}.{items}"
    ws.htap("failover", items, "on")
    assert spark.sql(f"SELECT 1 FROM {t} LIMIT 1").collect()[0][0] == 1
    assert last_scan(ws).route == "source"
    assert spark.sql(f"SELECT count(*) FROM (SELECT * FROM {t} UNION ALL SELECT * FROM {t})").collect()[0][0] == 400
    assert spark.sql(f"SELECT count(*) FROM {t} WHERE id % 2 = 0").collect()[0][0] == 100
    ws.htap("failover", items, "off")
    assert spark.sql(f"SELECT count(*) FROM {t} WHERE id % 2 = 0").collect()[0][0] == 100
    assert last_scan(ws).route == "replica"
    assert ws.table("items").state == "streaming"


def test_an_unhealthy_table_with_intact_files_recovers(workspace, spark, catalog, items):
    ws = workspace
    t = f"{catalog}.{items}"
    # As the reader before issue 12 left a table after a parser error of its own SQL:
    legacy = f"cannot read the deltas of table {ws.source}.{items} (the replica is damaged): Parser Error: SELECT clause without selection list"
    ws.stop_service()
    with ws.store() as store:
        store.set_state(ws.table("items").id, "unhealthy", legacy)
    spark.sql(f"SELECT count(*) FROM {t}").collect()
    assert last_scan(ws).route == "source" and "unhealthy" in last_scan(ws).reason
    out = ws.htap("tables", "recheck", items).stdout
    assert "unhealthy -> streaming" in out and "every delta file is intact" in out
    assert ws.table("items").state == "streaming" and ws.table("items").error is None
    ws.htap("tables", "recheck", items)  # nothing to do: fine
    assert spark.sql(f"SELECT count(*) FROM {t}").collect()[0][0] == 200
    assert last_scan(ws).route == "replica"

    # The service re-checks such tables by itself.
    with ws.store() as store:
        store.set_state(ws.table("items").id, "unhealthy", legacy)
    ws.start_service()
    wait_until(lambda: ws.table("items").state == "streaming", None, "automatic re-check")
    assert "every delta file is intact" in ws.log()


def test_a_routing_error_reaches_the_spark_user_as_one_line(workspace, spark, items):
    ws = workspace
    cat = f"r_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
    spark.conf.set(f"spark.sql.catalog.{cat}.route", "replica")
    ws.htap("failover", items, "on")
    with pytest.raises(Exception) as e:
        spark.sql(f"SELECT * FROM {cat}.{items}").collect()
    text = str(e.value)
    assert text.splitlines() == [f"{items}: the catalog requires the replica (route=replica), but failover is on for the table"], text


def test_every_query_sees_one_snapshot_under_writes_with_user_and_failover(workspace, spark):
    """pgbench's invariant (sum of accounts = sum of tellers = sum of branches) through Spark while
    a writer runs, with the `user` option (its access check is a round trip to the source between
    a scan's metadata reads) and route=auto: first all on the replica, then with one table failed
    over, when every table of the source must read from the source at one exported snapshot."""
    import threading

    import psycopg2

    from services import pg_dsn

    ws = workspace
    names = {"acc": "abalance", "tel": "tbalance", "bra": "bbalance"}
    for t, col in names.items():
        ws.sql(f"CREATE TABLE {ws.schema}.{t} (id int PRIMARY KEY, {col} bigint NOT NULL)")
        ws.sql(f"INSERT INTO {ws.schema}.{t} SELECT g, 0 FROM generate_series(1, {dict(acc=200, tel=20, bra=4)[t]}) g")
        ws.htap("tables", "add", f"{ws.schema}.{t}")
    role = f"u_{ws.source}"
    ws.sql(f"CREATE ROLE {role}")
    ws.sql(f"GRANT USAGE ON SCHEMA {ws.schema} TO {role}")
    for t in names:
        ws.sql(f"GRANT SELECT ON {ws.schema}.{t} TO {role}")
    ws.start_service()
    for t in names:
        ws.wait_readable(t)
    cat = f"u_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
    spark.conf.set(f"spark.sql.catalog.{cat}.user", role)

    stop = threading.Event()
    written = []

    def writer():  # pgbench's TPC-B-like transaction, without history
        conn = psycopg2.connect(pg_dsn())
        cur = conn.cursor()
        i = 0
        while not stop.is_set():
            delta = 1 + i % 3
            cur.execute(f"UPDATE {ws.schema}.acc SET abalance = abalance + %s WHERE id = %s", (delta, i % 200 + 1))
            cur.execute(f"UPDATE {ws.schema}.tel SET tbalance = tbalance + %s WHERE id = %s", (delta, i % 20 + 1))
            cur.execute(f"UPDATE {ws.schema}.bra SET bbalance = bbalance + %s WHERE id = %s", (delta, i % 4 + 1))
            conn.commit()
            i += 1
        written.append(i)
        conn.close()

    q = (f"SELECT (SELECT sum(abalance) FROM {cat}.{ws.schema}.acc), (SELECT sum(tbalance) FROM {cat}.{ws.schema}.tel),"
         f" (SELECT sum(bbalance) FROM {cat}.{ws.schema}.bra), (SELECT count(*) FROM {cat}.{ws.schema}.acc)")

    def routes():
        with ws.store() as store:
            return [store.recent_scans(ws.table(t).id, 1)[0] for t in names]

    w = threading.Thread(target=writer)
    w.start()
    try:
        for phase in ("replica", "source"):
            if phase == "source":
                ws.htap("failover", f"{ws.schema}.tel", "on")
            for _ in range(8):
                a, t, b, n = spark.sql(q).collect()[0]
                assert a == t == b and n == 200, (phase, a, t, b)
                scans = routes()
                assert {s.route for s in scans} == {phase}, scans
                if phase == "replica":
                    assert len({s.seq for s in scans}) == 1, scans
    finally:
        stop.set()
        w.join()
        ws.sql(f"DROP OWNED BY {role}")
        ws.sql(f"DROP ROLE {role}")
    assert written and written[0] > 0


EXPRESSION_QUERIES = [
    # TPC-H Q1's shape: sums over decimal arithmetic, avg, count, grouped; filters over expressions.
    "SELECT grp, sum(price * (1 - disc)), sum(q), avg(disc), count(*), min(year(d)), max(substring(grp, 2, 1))"
    " FROM {t} WHERE d >= date '2024-03-01' AND price * 2 > 10 GROUP BY grp",
    # Q6's shape.
    "SELECT sum(price * disc) FROM {t} WHERE disc BETWEEN 0.02 AND 0.05 AND year(d) = 2024 AND q < 100",
    "SELECT sum(CASE WHEN grp LIKE 'g1%' THEN price ELSE 0 END), sum(coalesce(disc, 1)) FROM {t} WHERE id IN (1, 5, 9) OR d IS NULL OR NOT (id > 20)",
    "SELECT year(d), month(d), sum(q) FROM {t} GROUP BY year(d), month(d)",
    # Q1's charge: Spark's type of the product has 40 digits, kept in 38 without rounding.
    "SELECT grp, sum(price * (1 - disc) * (1 + disc)), count(*) FROM {t} GROUP BY grp",
    # Products of 38 digits (DECIMAL(38,6)), and of 40 that Spark keeps in 38 without rounding.
    "SELECT grp, sum(price * price * price), sum(price * price * price * 2) FROM {t} GROUP BY grp",
]


# Compound predicates with a part no pushdown path can express (length): the whole predicate
# stays in Spark. Spark's V2-to-V1 conversion once handed back the LIKE alone as the whole OR,
# which dropped every row matched by the other side.
PARTLY_PUSHABLE_QUERIES = [
    "SELECT id FROM {t} WHERE grp LIKE 'g1%' OR length(grp) > 1 OR id < 3",
    "SELECT id FROM {t} WHERE id < 10 OR length(grp) > 1 OR grp LIKE 'g1%'",
    "SELECT id FROM {t} WHERE NOT (grp LIKE 'g1%' OR length(grp) > 2)",
]


@pytest.mark.parametrize("route", ["replica", "source"])
def test_expressions_are_pushed_and_agree_with_spark_itself(workspace, spark, catalog, items, route):
    """Filters and aggregates over expressions run in the reader (DuckDB, or the source's SQL on
    failover) and give exactly what Spark computes itself over the same rows, decimals included:
    `q` numeric(4,2) sums far past its own precision (partial sums split to fit, see
    htap.pushdown.partials)."""
    ws = workspace
    ws.stop_service()
    ws.sql(f"ALTER TABLE {items} ADD COLUMN q numeric(4,2)")
    ws.sql(f"UPDATE {items} SET q = 99.99")
    ws.sql(f"UPDATE {items} SET d = NULL WHERE id % 50 = 0")
    ws.start_service()
    wait_until(lambda: "q" in [c.name for c in ws.table("items").columns], None, "the added column")
    ws.wait_caught_up("items")
    if route == "source":
        ws.htap("failover", items, "on")
    t = f"{catalog}.{items}"
    plain = spark.createDataFrame(spark.table(t).toPandas(), schema=spark.table(t).schema)
    plain.createOrReplaceTempView("items_plain")
    try:
        # One task (its aggregate complete), and one task per partition: partial sums Spark merges.
        for split in ("auto", "true"):
            with spark_confs(spark, {"spark.htap.splitTableScans": split}):
                for q in EXPRESSION_QUERIES:
                    plan = spark.sql("EXPLAIN " + q.format(t=t)).collect()[0][0]
                    pushed = plan[plan.index("pushed="):]
                    (scan,) = pushed_plans(plan)
                    assert top_aggregate(scan) and '"op"' in pushed, plan  # expressions computed in the reader
                    # Complete in one task, but an AVG stays Spark's over partial sums and counts.
                    assert complete_aggregate(scan) == (split == "auto" and "avg(" not in q), plan
                    got = normalized(spark.sql(q.format(t=t)).collect())
                    assert last_scan(ws).route == route
                    assert got == normalized(spark.sql(q.format(t="items_plain")).collect()), (split, q)
        for q in PARTLY_PUSHABLE_QUERIES:
            got = normalized(spark.sql(q.format(t=t)).collect())
            assert got and got == normalized(spark.sql(q.format(t="items_plain")).collect()), q
    finally:
        spark.catalog.dropTempView("items_plain")
