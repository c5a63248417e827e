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
    spark.conf.set(TIMEOUT, "120")  # a loaded machine is slow, never wrong: the wait ends when the tail covers it
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
            assert scan.route == "replica" and "in-memory tail" in scan.reason, (scan, ws.log()[-3000:])
            assert scan.seq > durable
            # Aggregates and joins pushed over the tail (one task reading every partition).
            got = spark.sql(f"SELECT count(*), sum(a.balance) FROM {ref} a JOIN {ref} b USING (id)").collect()[0]
            assert tuple(got) == tuple(ws.sql(f"SELECT count(*), sum(balance) FROM {accounts}")[0])
        assert ws.table("accounts").max_safe_seq == durable  # every change above came from the tail
        # Operations see both seqs: the durable position, and the visible one past it.
        status = json.loads(ws.htap("status", "--json").stdout)["sources"][0]
        assert status["position"] == durable and status["visible"] >= scan.seq and status["tail_bytes"] > 0, status
        assert "visible " in ws.htap("status").stdout
        for system in ("tables", "freshness"):  # and per table in the system tables
            row = spark.sql(f"SELECT max_safe_seq, visible_seq FROM {catalog}.htap.{system} WHERE table_name = 'accounts'").collect()[0]
            assert row.max_safe_seq == durable and row.visible_seq >= scan.seq, (system, row)
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


def test_tail_reads_under_transfers_and_kill9_see_one_snapshot_or_fail_cleanly(workspace, spark, catalog, accounts):
    """pgbench's invariant: transfers keep the total. Every read through the tail sees it whole —
    also while `htap serve` is killed under it: a query then answers at one snapshot (the durable
    one, planned after the kill) or fails saying to re-run it (its tasks' tail went with the
    service), never a mix. After a restart nothing is lost or duplicated."""
    ws, ref = workspace, f"{catalog}.{accounts}"
    durable = start_without_checkpoints(ws, "accounts")
    stop = threading.Event()
    transfers: list[int] = []

    def transfer():
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
            transfers.append(n)
        finally:
            conn.close()

    outcomes: list[object] = []  # (count, total) or the error's text
    progress = threading.Condition()

    def read():
        while not stop.is_set():
            try:
                got = tuple(spark.sql(f"SELECT count(*), sum(balance) FROM {ref}").collect()[0])
            except Exception as e:  # noqa: BLE001 - judged below
                got = str(e)
            with progress:
                outcomes.append(got)
                progress.notify_all()

    def reads_reach(n: int) -> None:
        with progress:
            assert progress.wait_for(lambda: len(outcomes) >= n, timeout=600), outcomes

    spark.conf.set(READ_TAIL, "true")
    threads = [threading.Thread(target=transfer), threading.Thread(target=read)]
    for t in threads:
        t.start()
    try:
        reads_reach(8)
        through_tail = last_scan(ws, "accounts").seq
        ws.service.send_signal(signal.SIGKILL)  # while the reader keeps querying
        ws.service.wait()
        reads_reach(len(outcomes) + 6)
    finally:
        stop.set()
        for t in threads:
            t.join()
        spark.conf.unset(READ_TAIL)
    assert transfers and transfers[0] > 0
    answered = [o for o in outcomes if isinstance(o, tuple)]
    failed = [o for o in outcomes if not isinstance(o, tuple)]
    assert set(answered) == {(200, 200_000)}, outcomes  # one snapshot each: the total holds
    assert all("re-run the query" in f for f in failed), failed
    assert len(answered) >= 8 and through_tail > durable
    # Restarted: the stream resumes at the durable position; nothing lost, nothing twice.
    tune(ws, flush_interval_s=0.2)
    ws.start_service()
    ws.wait_caught_up("accounts")
    assert replica_rows(spark, ref) == source_rows(ws, accounts)


def test_read_your_writes_through_the_tail_on_mariadb(my_workspace, spark, my_catalog):
    """MariaDB: `now` is the binlog's end; the service's visible seq passes it within a publish."""
    ws = my_workspace
    t = f"{ws.schema}.notes"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, body varchar(40)) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t} SELECT seq, concat('n', seq) FROM seq_1_to_10")
    ws.htap("tables", "add", t)
    durable = start_without_checkpoints(ws, "notes")
    ref = f"{my_catalog}.{t}"
    spark.conf.set(READ_TAIL, "true")
    spark.conf.set(READ_AFTER, "now")
    spark.conf.set(TIMEOUT, "120")
    try:
        for i in range(100, 106):
            ws.sql(f"INSERT INTO {t} VALUES ({i}, 'written {i}')")
            ws.sql(f"UPDATE {t} SET body = 'changed {i}' WHERE id = 1")
            ws.sql(f"DELETE FROM {t} WHERE id = {i - 98}")
            got = [tuple(r) for r in spark.sql(f"SELECT id, body FROM {ref} ORDER BY id").collect()]
            assert got == [tuple(r) for r in ws.sql(f"SELECT id, body FROM {t} ORDER BY id")]
            scan = last_scan(ws, "notes")
            assert scan.route == "replica" and "in-memory tail" in scan.reason and scan.seq > durable, (scan, ws.log()[-3000:])
        assert ws.table("notes").max_safe_seq == durable
    finally:
        for key in (READ_TAIL, READ_AFTER, TIMEOUT):
            spark.conf.unset(key)
