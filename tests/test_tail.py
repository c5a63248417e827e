"""The in-memory tail (issue 28 item 2): with `spark.htap.readTail = true`, a query reads the
changes the service has decoded but not yet checkpointed, from its memory, merged with the
deltas as their newest one — at one snapshot, the service's visible seq.

The service here checkpoints only when it stops (flush_interval_s = 3600, after a first run that
made the tables readable), so every change a query sees after that came from the tail: the
tests say so by the durable seq, which does not move, not by timing. Then `kill -9` of the
service: queries read the durable snapshot again (or fail as their route says), and after a
restart nothing is lost or duplicated.
"""

from __future__ import annotations

import json
import signal
import threading

import pytest

from conftest import tune
from services import pg_dsn
from workspace import wait_until

READ_TAIL = "spark.htap.readTail"
READ_AFTER = "spark.htap.readAfter"
TIMEOUT = "spark.htap.readAfterTimeoutSeconds"


def last_scan(ws, table: str):
    with ws.store() as store:
        return store.recent_scans(ws.table(table).id, 1)[0]


def tail_served(ws) -> bool:
    with ws.store() as store:
        return any(b.get("tail") and b["pid"] == ws.service.pid for b in store.service_beats())


def start_without_checkpoints(ws, *tables: str) -> int:
    """Run the service until the tables are readable, then again with checkpoints only at stop:
    returns the durable seq, which stays put while it runs."""
    ws.start_service()
    for t in tables:
        ws.wait_readable(t)
    ws.wait_caught_up(tables[0])
    ws.stop_service()
    tune(ws, flush_interval_s=3600.0)
    ws.start_service()
    wait_until(lambda: tail_served(ws), None, "the service to serve its tail")
    return ws.table(tables[0]).max_safe_seq


@pytest.fixture
def accounts(workspace):
    ws = workspace
    t = f"{ws.schema}.accounts"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, balance bigint NOT NULL, note text)")
    ws.sql(f"ALTER TABLE {t} ALTER COLUMN note SET STORAGE EXTERNAL")  # updates leave it out: partial rows
    ws.sql(f"INSERT INTO {t} SELECT g, 1000, repeat('x', 3000) || g FROM generate_series(1, 200) g")
    ws.htap("tables", "add", t)
    return t


def source_rows(ws, table: str) -> list[tuple]:
    return [tuple(r) for r in ws.sql(f"SELECT id, balance, md5(note) FROM {table} ORDER BY id")]


def replica_rows(spark, ref: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(f"SELECT id, balance, md5(note) FROM {ref} ORDER BY id").collect()]


def test_reads_see_the_changes_not_yet_checkpointed_and_kill9_loses_nothing(workspace, spark, catalog, accounts):
    ws, ref = workspace, f"{catalog}.{accounts}"
    durable = start_without_checkpoints(ws, "accounts")
    spark.conf.set(READ_TAIL, "true")
    spark.conf.set(READ_AFTER, "now")
    try:
        plan = spark.sql(f"EXPLAIN SELECT count(*) FROM {ref}").collect()[0][0]
        assert "readTail=true" in plan, plan
        for i in range(6):
            # Inserts, updates that leave the TOASTed note out (partial rows), deletes, a key change
            # (with its values: a partial row that moved keys stops the tail until the checkpoint).
            ws.sql(f"INSERT INTO {accounts} VALUES ({1000 + i}, {i}, 'new {i}')")
            ws.sql(f"UPDATE {accounts} SET balance = balance - 10 WHERE id BETWEEN {i * 10} AND {i * 10 + 5}")
            ws.sql(f"DELETE FROM {accounts} WHERE id = {150 + i}")
            ws.sql(f"UPDATE {accounts} SET id = {2000 + i}, note = 'moved' WHERE id = {100 + i}")
            assert replica_rows(spark, ref) == source_rows(ws, accounts)
            scan = last_scan(ws, "accounts")
            assert scan.route == "replica" and "in-memory tail" in scan.reason, scan
            assert scan.seq > durable
            # Aggregates and joins pushed over the tail (one task reading every partition).
            got = spark.sql(f"SELECT count(*), sum(a.balance) FROM {ref} a JOIN {ref} b USING (id)").collect()[0]
            assert tuple(got) == tuple(ws.sql(f"SELECT count(*), sum(balance) FROM {accounts}")[0])
        assert ws.table("accounts").max_safe_seq == durable  # every change above came from the tail
        # Operations see both seqs: the durable position, and the visible one past it.
        status = json.loads(ws.htap("status", "--json").stdout)["sources"][0]
        assert status["position"] == durable and status["visible"] >= scan.seq and status["tail_bytes"] > 0, status
        assert "visible " in ws.htap("status").stdout
        # Each query's pin ends with the query (the driver releases it with the query's leases).
        wait_until(lambda: json.loads(ws.htap("status", "--json").stdout)["sources"][0]["tail_pins"] == 0, None,
                   "the queries' tail pins to be released")

        # kill -9: the tail is gone with the service. A query reads the durable snapshot (auto:
        # readAfter cannot be met there, so the source answers), never a mix.
        ws.service.send_signal(signal.SIGKILL)
        ws.service.wait()
        spark.conf.set(TIMEOUT, "0.2")
        assert replica_rows(spark, ref) == source_rows(ws, accounts)
        assert last_scan(ws, "accounts").route == "source"
        spark.conf.unset(READ_AFTER)
        rows = replica_rows(spark, ref)
        assert len(rows) == 200 and last_scan(ws, "accounts").seq == durable  # the durable snapshot
    finally:
        for key in (READ_TAIL, READ_AFTER, TIMEOUT):
            spark.conf.unset(key)
    # Restarted: the stream resumes at the durable position; nothing lost, nothing twice.
    tune(ws, flush_interval_s=0.2)
    ws.start_service()
    ws.wait_caught_up("accounts")
    assert replica_rows(spark, ref) == source_rows(ws, accounts)


def test_tail_reads_under_concurrent_transfers_see_one_snapshot(workspace, spark, catalog, accounts):
    """pgbench's invariant: transfers keep the total; every read through the tail sees it whole."""
    ws, ref = workspace, f"{catalog}.{accounts}"
    durable = start_without_checkpoints(ws, "accounts")
    stop = threading.Event()
    done = []

    def transfers():
        import psycopg2

        conn = psycopg2.connect(pg_dsn())
        try:
            n = 0
            while not stop.is_set():
                a, b = n % 200 + 1, (n * 7) % 200 + 1
                with conn.cursor() as cur:
                    cur.execute(f"UPDATE {accounts} SET balance = balance - 3 WHERE id = %s", (a,))
                    cur.execute(f"UPDATE {accounts} SET balance = balance + 3 WHERE id = %s", (b,))
                conn.commit()
                n += 1
            done.append(n)
        finally:
            conn.close()

    writer = threading.Thread(target=transfers)
    writer.start()
    spark.conf.set(READ_TAIL, "true")
    try:
        seen = set()
        for _ in range(12):
            count, total = spark.sql(f"SELECT count(*), sum(balance) FROM {ref}").collect()[0]
            assert (count, total) == (200, 200_000)
            seen.add(last_scan(ws, "accounts").seq)
        assert len(seen) > 1 and max(seen) > durable  # reads moved with the writes, past the durable seq
    finally:
        stop.set()
        writer.join()
        spark.conf.unset(READ_TAIL)
    assert done and done[0] > 0
    ws.stop_service()  # a clean stop checkpoints
    assert ws.table("accounts").max_safe_seq > durable
