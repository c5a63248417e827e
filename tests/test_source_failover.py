"""Issue 14: failover reads from a MariaDB source — the same Spark test as Postgres
(tests/test_spark_integration.py), every common type read through both routes, and access
checks against MySQL's grants."""

from __future__ import annotations

import pytest
from test_mysql import TYPES_DDL, TYPES_INSERT, assert_same

from htap.rewrite.pushed import PushedPlan

from conftest import normalized, top_aggregate

AGG = "SELECT region, count(*), sum(amount), min(id), max(note) FROM {t} WHERE id > 10 GROUP BY region"


@pytest.fixture
def my_orders(my_workspace):
    ws = my_workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region varchar(10) NOT NULL, amount decimal(10,2), note varchar(20),"
           f" secret varchar(20)) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t} SELECT seq, concat('r', seq % 3), seq * 1.5, concat('n', seq % 7), concat('s', seq)"
           f" FROM seq_1_to_300")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("orders")
    return t


def last_route(ws, name="orders"):
    store = ws.store()
    try:
        return store.recent_scans(ws.table(name).id, 1)[0]
    finally:
        store.close()


def test_failover_on_and_off_return_identical_results_for_mariadb(my_workspace, spark, my_catalog, my_orders):
    ws, catalog, orders = my_workspace, my_catalog, my_orders
    q = AGG.format(t=f"{catalog}.{orders}")
    replica = normalized(spark.sql(q).collect())
    assert last_route(ws).route == "replica"

    ws.htap("failover", orders, "on")
    assert ws.table("orders").failover
    source = normalized(spark.sql(q).collect())
    scan = last_route(ws)
    assert scan.route == "source" and "failover is on" in scan.reason
    assert top_aggregate(PushedPlan.from_dict(scan.pushed))  # the same pushed plan ran on MariaDB
    assert source == replica == normalized(ws.sql(AGG.format(t=orders)))
    rows = f"SELECT * FROM {catalog}.{orders} WHERE region = 'r1' AND note >= 'n3'"
    assert normalized(spark.sql(rows).collect()) == normalized(
        ws.sql(f"SELECT * FROM {orders} WHERE region = 'r1' AND note >= 'n3'")
    )

    ws.htap("failover", orders, "off")
    assert normalized(spark.sql(q).collect()) == replica
    assert last_route(ws).route == "replica"


def test_every_common_type_reads_the_same_through_both_routes(my_workspace, spark, my_catalog):
    ws = my_workspace
    t = f"{ws.schema}.types"
    ws.sql(TYPES_DDL.format(t=t))
    ws.sql(TYPES_INSERT.format(t=t, lo=1, hi=200))
    ws.sql(f"INSERT INTO {t} (id) VALUES (100000)")  # every other column NULL
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("types")
    q = f"SELECT * FROM {my_catalog}.{t}"
    replica = normalized(spark.sql(q).collect())
    ws.htap("failover", t, "on")
    source = normalized(spark.sql(q).collect())
    assert last_route(ws, "types").route == "source"
    assert len(source) == 201
    assert_same(source, replica, "source route vs replica route")


def test_access_is_checked_against_the_mysql_grants(my_workspace, spark, my_orders):
    ws, orders = my_workspace, my_orders
    user = f"u_{ws.source}"
    ws.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    try:
        ws.sql(f"GRANT SELECT (id, region) ON {orders} TO '{user}'@'%'")
        cat = f"u_{ws.source}"
        spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
        spark.conf.set(f"spark.sql.catalog.{cat}.user", user)
        allowed = spark.sql(f"SELECT id, region FROM {cat}.{orders} WHERE id < 5").collect()
        assert normalized(allowed) == normalized(ws.sql(f"SELECT id, region FROM {orders} WHERE id < 5"))
        with pytest.raises(Exception, match=rf"HTAP_PERMISSION_DENIED.*{user}.*secret"):
            spark.sql(f"SELECT id, secret FROM {cat}.{orders}").collect()
        (count,) = spark.sql(f"SELECT count(*) FROM {cat}.{orders}").collect()[0]  # any one column's grant
        assert count == ws.sql(f"SELECT count(*) FROM {orders}")[0][0]
        ws.sql(f"GRANT SELECT ON {orders} TO '{user}'@'%'")  # a table grant covers every column
        assert len(spark.sql(f"SELECT id, secret FROM {cat}.{orders}").collect()) == 300
        nobody = f"n_{ws.source}"
        spark.conf.set(f"spark.sql.catalog.{nobody}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{nobody}.config", str(ws.config))
        spark.conf.set(f"spark.sql.catalog.{nobody}.user", "nobody_here")
        with pytest.raises(Exception, match=r"HTAP_PERMISSION_DENIED.*'nobody_here'@'%' does not exist"):
            spark.sql(f"SELECT id FROM {nobody}.{orders}").collect()
    finally:
        ws.sql(f"DROP USER IF EXISTS '{user}'@'%'")


def test_failover_reads_under_concurrent_writes_see_every_earlier_commit(my_workspace, spark, my_catalog, my_orders):
    """MySQL cannot share a snapshot between connections: a failover query's reads run at a
    consistent snapshot no older than the one the query exported, never failing because the
    source moved on."""
    import threading

    from mysql_support import my_connect

    ws, orders = my_workspace, my_orders
    ws.htap("failover", orders, "on")
    stop, inserted, errors = threading.Event(), [300], []

    def writer():
        conn = my_connect(ws.schema)
        try:
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(f"INSERT INTO {orders} VALUES (%s, 'r9', 1, 'n', 's')", (inserted[0] + 1,))
                inserted[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            conn.close()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(3):
            before = inserted[0]
            (count,) = spark.sql(f"SELECT count(*) FROM {my_catalog}.{orders}").collect()[0]
            assert last_route(ws).route == "source"
            assert count >= before
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors and inserted[0] > 300
