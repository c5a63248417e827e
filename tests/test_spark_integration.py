"""Issue 5: time travel, failover on and off, automatic failover, access control, SHOW TABLES —
through spark.sql only."""

from __future__ import annotations

import re
import time

import pytest

from htap.rewrite.pushed import PushedPlan

from conftest import normalized, top_aggregate, wait_until
from services import pg_dsn


@pytest.fixture
def orders(workspace):
    ws = workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region text NOT NULL, amount numeric(10,2), secret text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'r' || (g % 3), g * 1.5, 's' || g FROM generate_series(1, 300) g")
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


AGG = "SELECT region, count(*), sum(amount), min(id) FROM {t} WHERE id > 10 GROUP BY region"


def test_time_travel_returns_an_earlier_state(workspace, spark, catalog, orders):
    ws = workspace
    ws.wait_caught_up("orders")
    before_seq = ws.table("orders").max_safe_seq
    before = normalized(ws.sql(f"SELECT * FROM {orders}"))
    time.sleep(1.2)  # safe points are kept per second
    before_time = time.time()
    time.sleep(1.2)
    ws.sql(f"UPDATE {orders} SET amount = 0 WHERE id <= 100")
    ws.sql(f"DELETE FROM {orders} WHERE id > 250")
    ws.wait_caught_up("orders")

    now = normalized(spark.sql(f"SELECT * FROM {catalog}.{orders}").collect())
    assert now == normalized(ws.sql(f"SELECT * FROM {orders}")) != before
    by_version = spark.sql(f"SELECT * FROM {catalog}.{orders} VERSION AS OF {before_seq}").collect()
    assert normalized(by_version) == before
    assert last_route(ws).route == "replica" and last_route(ws).seq == before_seq
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(before_time))
    by_time = spark.sql(f"SELECT * FROM {catalog}.{orders} TIMESTAMP AS OF '{stamp}'").collect()
    assert normalized(by_time) == before
    with pytest.raises(Exception, match="cannot time travel"):
        spark.sql(f"SELECT * FROM {catalog}.{orders} VERSION AS OF 1").collect()


def test_failover_on_and_off_return_identical_results(workspace, spark, catalog, orders):
    ws = workspace
    q = AGG.format(t=f"{catalog}.{orders}")
    replica = normalized(spark.sql(q).collect())
    assert last_route(ws).route == "replica"

    spark.sql(f"ALTER TABLE {catalog}.{orders} SET TBLPROPERTIES ('htap.failover' = 'true')")
    assert ws.table("orders").failover
    source = normalized(spark.sql(q).collect())
    scan = last_route(ws)
    assert scan.route == "source" and "failover is on" in scan.reason
    assert top_aggregate(PushedPlan.from_dict(scan.pushed))  # the same pushed plan ran on the source
    assert source == replica == normalized(ws.sql(AGG.format(t=orders)))

    ws.htap("failover", orders, "off")
    assert normalized(spark.sql(q).collect()) == replica
    assert last_route(ws).route == "replica"


def _exporters(ws) -> set[int]:
    """Backends of source transactions holding an exported snapshot (htap.pushdown.source_snapshot)."""
    return {pid for (pid,) in ws.sql("SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction'"
                                      " AND query LIKE 'SELECT pg_export_snapshot()%'")}


def test_a_failover_query_releases_its_source_snapshot_when_it_ends(workspace, spark, catalog, orders):
    """The exported snapshot a failover query reads at is an open transaction on the source (a
    busy backend, vacuum held back): it ends with the query, not minutes later. Running the
    same DataFrame's plan again after that fails saying why and what to do, never reading a
    different snapshot."""
    from htap.replica.leases import QUERY_HOLDER_PREFIX

    ws = workspace
    q = AGG.format(t=f"{catalog}.{orders}")
    earlier = _exporters(ws)  # of earlier tests' queries planned and never run, say
    ws.htap("failover", orders, "on")
    df = spark.sql(q)
    assert normalized(df.collect()) == normalized(ws.sql(AGG.format(t=orders)))
    assert last_route(ws).route == "source"
    ws.htap("failover", orders, "off")
    # A replica query after it: the driver releases each query's leases and snapshots in the
    # order the queries ended, so once this one's lease is gone the first one's snapshot is too.
    assert normalized(spark.sql(q).collect()) == normalized(ws.sql(AGG.format(t=orders)))
    assert last_route(ws).route == "replica"

    def query_leases() -> list:
        with ws.store() as store:
            return [p for p in store.live_pins(ws.table("orders").id) if p.holder.startswith(QUERY_HOLDER_PREFIX)]

    wait_until(lambda: not query_leases(), None, "the replica query's lease released")
    assert not _exporters(ws) - earlier
    with pytest.raises(Exception, match="source snapshot is no longer held"):
        df.collect()


def test_automatic_failover_when_stale_or_unhealthy_and_recovery(workspace, spark, catalog, orders):
    ws = workspace
    q = f"SELECT * FROM {catalog}.{orders} WHERE region = 'r1'"
    spark.sql(f"ALTER TABLE {catalog}.{orders} SET TBLPROPERTIES ('htap.max_staleness' = '30')")
    ws.stop_service()
    store = ws.store()
    with store:  # make the replica look 60 s old
        store._x("UPDATE tables SET max_safe_time = max_safe_time - 60 WHERE id = ?", (ws.table("orders").id,))
    ws.sql(f"UPDATE {orders} SET secret = 'fresh' WHERE region = 'r1'")
    got = normalized(spark.sql(q).collect())
    assert got == normalized(ws.sql(f"SELECT * FROM {orders} WHERE region = 'r1'"))  # the source's fresh rows
    assert last_route(ws).route == "source" and "behind" in last_route(ws).reason

    ws.start_service()  # recovery: once the replica catches up, reads return to it
    wait_until(lambda: ws.table("orders").max_safe_time and time.time() - ws.table("orders").max_safe_time < 5, None, "fresh replica")
    ws.wait_caught_up("orders")
    assert normalized(spark.sql(q).collect()) == got
    assert last_route(ws).route == "replica"


def test_a_user_without_select_gets_a_permission_error_not_data(workspace, spark, orders):
    ws = workspace
    role = f"r_{ws.source}"
    ws.sql(f"CREATE ROLE {role}")
    try:
        ws.sql(f"GRANT USAGE ON SCHEMA {ws.schema} TO {role}")
        ws.sql(f"GRANT SELECT (id, region) ON {orders} TO {role}")
        cat = f"u_{ws.source}"
        spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
        spark.conf.set(f"spark.sql.catalog.{cat}.user", role)
        allowed = spark.sql(f"SELECT id, region FROM {cat}.{orders} WHERE id < 5").collect()
        assert normalized(allowed) == normalized(ws.sql(f"SELECT id, region FROM {orders} WHERE id < 5"))
        with pytest.raises(Exception, match=rf"HTAP_PERMISSION_DENIED.*{role}.*secret"):
            spark.sql(f"SELECT id, secret FROM {cat}.{orders}").collect()
        with pytest.raises(Exception, match=rf"HTAP_PERMISSION_DENIED.*{role}.*secret"):
            spark.sql(f"SELECT count(*) FROM {cat}.{orders} WHERE secret IS NOT NULL").collect()
        # count(*) reads no column: a grant on any one column is enough, as in Postgres itself
        (count,) = spark.sql(f"SELECT count(*) FROM {cat}.{orders}").collect()[0]
        assert count == ws.sql(f"SELECT count(*) FROM {orders}")[0][0]
        ws.sql(f"REVOKE SELECT (id, region) ON {orders} FROM {role}")
        with pytest.raises(Exception, match=rf"HTAP_PERMISSION_DENIED.*{role}"):
            spark.sql(f"SELECT count(*) FROM {cat}.{orders}").collect()
    finally:
        ws.sql(f"DROP OWNED BY {role}")
        ws.sql(f"DROP ROLE {role}")


def test_show_tables_and_bad_properties(workspace, spark, catalog, orders):
    ws = workspace
    shown = {(r.namespace, r.tableName) for r in spark.sql(f"SHOW TABLES IN {catalog}.{ws.schema}").collect()}
    assert shown == {(ws.schema, "orders")}
    with pytest.raises(Exception, match="unknown table property 'htap.nope'"):
        spark.sql(f"ALTER TABLE {catalog}.{orders} SET TBLPROPERTIES ('htap.nope' = '1')")
    with pytest.raises(Exception, match="route = 'sideways' is not a route"):
        bad = f"b_{ws.source}"
        spark.conf.set(f"spark.sql.catalog.{bad}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{bad}.config", str(ws.config))
        spark.conf.set(f"spark.sql.catalog.{bad}.route", "sideways")
        spark.sql(f"SELECT * FROM {bad}.{orders}").collect()


def test_a_query_reads_all_its_htap_tables_at_one_snapshot_while_a_writer_runs(workspace, spark, catalog):
    import threading

    import psycopg2


    ws = workspace
    accounts, ledger = f"{ws.schema}.accounts", f"{ws.schema}.ledger"
    ws.sql(f"CREATE TABLE {accounts} (id int PRIMARY KEY, balance bigint NOT NULL)")
    ws.sql(f"CREATE TABLE {ledger} (id bigserial PRIMARY KEY, account int NOT NULL)")
    ws.sql(f"INSERT INTO {accounts} SELECT g, 1000 FROM generate_series(1, 50) g")
    ws.htap("tables", "add", accounts)
    ws.htap("tables", "add", ledger)
    ws.start_service()
    ws.wait_readable("accounts")
    ws.wait_readable("ledger")

    stop = threading.Event()

    def writer():  # every transaction: one unit leaves an account and is written to the ledger
        conn = psycopg2.connect(pg_dsn())
        cur = conn.cursor()
        i = 0
        while not stop.is_set():
            a = i % 50 + 1
            cur.execute(f"UPDATE {accounts} SET balance = balance - 1 WHERE id = %s", (a,))
            cur.execute(f"INSERT INTO {ledger} (account) VALUES (%s)", (a,))
            conn.commit()
            i += 1
        conn.close()

    w = threading.Thread(target=writer)
    w.start()
    try:
        invariant = (
            f"SELECT (SELECT sum(balance) FROM {catalog}.{accounts}) + (SELECT count(*) FROM {catalog}.{ledger})"
        )
        joined = (
            f"SELECT a.id, a.balance, count(l.id) AS moved FROM {catalog}.{accounts} a"
            f" LEFT JOIN {catalog}.{ledger} l ON l.account = a.id GROUP BY a.id, a.balance"
        )
        for _ in range(6):
            assert spark.sql(invariant).collect()[0][0] == 50 * 1000
            rows = spark.sql(joined).collect()
            assert all(r.balance + r.moved == 1000 for r in rows), rows
            store = ws.store()
            seqs = {store.recent_scans(ws.table(n).id, 1)[0].seq for n in ("accounts", "ledger")}
            store.close()
            assert len(seqs) == 1, seqs  # both tables read at the same snapshot
    finally:
        stop.set()
        w.join()
    plan = spark.sql("EXPLAIN " + joined).collect()[0][0]
    assert plan.count("snapshot=") == 1 and "joined inside the scan" in plan, plan  # one scan reads both
    spark.conf.set("spark.sql.optimizer.datasourceV2JoinPushdown", "false")
    try:
        spark.conf.set("spark.htap.wholeQueryPushdown", "true")
        plan = spark.sql("EXPLAIN " + joined).collect()[0][0]
        assert plan.count("snapshot=") == 1 and "whole subtree pushed" in plan, plan  # the subtree strategy joins them
        spark.conf.set("spark.htap.wholeQueryPushdown", "false")
        plan = spark.sql("EXPLAIN " + joined).collect()[0][0]
    finally:
        spark.conf.set("spark.sql.optimizer.datasourceV2JoinPushdown", "true")
        spark.conf.unset("spark.htap.wholeQueryPushdown")
    assert plan.count("snapshot=") == 2, plan  # neither pushdown: two scans, one snapshot token
    assert len(set(re.findall(r"snapshot=(\S+)", plan))) == 1, plan


def test_system_tables_show_state_and_the_last_routing_decision(workspace, spark, catalog, orders):
    ws = workspace
    spark.sql(f"SELECT count(*) FROM {catalog}.{orders}").collect()
    # The service keeps advancing the safe seq (keepalives): the system table shows a value
    # between the ones read just before and just after it.
    before = ws.table("orders").max_safe_seq
    row = spark.sql(
        f"SELECT state, deltas, max_safe_seq, failover, last_route, last_route_reason FROM {catalog}.htap.tables"
        f" WHERE schema_name = '{ws.schema}' AND table_name = 'orders'"
    ).collect()
    after = ws.table("orders").max_safe_seq
    assert len(row) == 1
    r = row[0]
    assert r.state == "streaming" and r.deltas >= 1
    assert before <= r.max_safe_seq <= after
    assert r.failover is False and r.last_route == "replica"
    ws.htap("failover", orders, "on")
    spark.sql(f"SELECT count(*) FROM {catalog}.{orders}").collect()
    r = spark.sql(f"SELECT failover, last_route, last_route_reason FROM {catalog}.htap.tables WHERE table_name = 'orders'").collect()[0]
    assert r.failover is True and r.last_route == "source" and "failover is on" in r.last_route_reason
    fresh = spark.sql(f"SELECT table_name, delay_s, max_safe_time FROM {catalog}.htap.freshness").collect()
    assert [f.table_name for f in fresh] == ["orders"] and fresh[0].delay_s is not None
    assert {r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.htap").collect()} == {"tables", "freshness"}
