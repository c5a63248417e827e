"""Issue 12 item 6 on a MySQL/MariaDB source: a failover query never silently mixes states.

MariaDB cannot share a snapshot between connections, so a failover query whose tables of the
source are read by SEPARATE scans (here a UNION ALL of two tables, with the whole-subtree
strategy and DSv2 join pushdown off, so nothing carries them as one statement) opens one
consistent snapshot per scan. Each scan records the binlog position of its snapshot in the
metadata store and fails when another scan of the same query read another position
(htap.pushdown.source_reader.SourceReadAgreement). A writer moving money between the two tables
in single transactions keeps their total constant: every query either returns that total or
fails with the new error, never a mixed sum."""

from __future__ import annotations

import threading

import pytest

from conftest import spark_confs

CONFS = ("spark.htap.wholeQueryPushdown", "spark.sql.optimizer.datasourceV2JoinPushdown")
TOTAL = 10_000
MIXED = "cannot share a snapshot between connections, so the query's separate scans"


@pytest.fixture
def accounts(my_workspace):
    """Two tables whose balances always sum to TOTAL (the writer keeps that invariant), both
    failed over to the source."""
    ws = my_workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.a (id int PRIMARY KEY, bal bigint NOT NULL) ENGINE=InnoDB")
    ws.sql(f"CREATE TABLE {s}.b (id int PRIMARY KEY, bal bigint NOT NULL) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {s}.a SELECT seq, IF(seq = 1, {TOTAL}, 0) FROM seq_1_to_20")
    ws.sql(f"INSERT INTO {s}.b SELECT seq, 0 FROM seq_1_to_20")
    for t in ("a", "b"):
        ws.htap("tables", "add", f"{s}.{t}")
    ws.start_service()
    for t in ("a", "b"):
        ws.wait_readable(t)
        ws.htap("failover", f"{s}.{t}", "on")
    return s


@pytest.fixture
def separate_scans(spark):
    """The strategy and DSv2 join pushdown off: each table is its own scan."""
    with spark_confs(spark, dict.fromkeys(CONFS, "false")):
        yield


def _query(catalog: str, s: str) -> str:
    return (f"SELECT sum(bal) FROM (SELECT bal FROM {catalog}.{s}.a UNION ALL SELECT bal FROM {catalog}.{s}.b)")


def _source_reads(ws) -> list[tuple]:
    """The agreement records (token, scan, what, position): which scans checked their snapshot."""
    store = ws.store()
    try:
        return [tuple(r) for r in store._all("SELECT token, scan, what, position FROM query_source_reads ORDER BY created_at")]
    finally:
        store.close()


def test_separate_scans_of_a_quiet_source_agree_and_succeed(my_workspace, spark, my_catalog, accounts, separate_scans):
    ws = my_workspace
    for _ in range(2):
        assert spark.sql(_query(my_catalog, accounts)).collect()[0][0] == TOTAL
    reads = _source_reads(ws)
    last_run = [r for r in reads if r[0] == reads[-1][0]]
    # Both scans were separate source reads, checked against each other, at one position.
    assert sorted(r[2] for r in last_run) == [f"{accounts}.a", f"{accounts}.b"]
    assert len({r[3] for r in last_run}) == 1


def test_separate_scans_under_transfers_never_mix_states(my_workspace, spark, my_catalog, accounts, separate_scans):
    from mysql_support import my_connect

    s = accounts
    stop, errors, transfers = threading.Event(), [], [0]

    def writer():
        conn = my_connect(s)
        try:
            i = 0
            while not stop.is_set():
                i += 1
                with conn.cursor() as cur:  # one transaction: the total stays TOTAL in every state
                    cur.execute("BEGIN")
                    cur.execute(f"UPDATE {s}.a SET bal = bal - 1 WHERE id = %s", (1 + i % 20,))
                    cur.execute(f"UPDATE {s}.b SET bal = bal + 1 WHERE id = %s", (1 + i % 20,))
                    cur.execute("COMMIT")
                transfers[0] += 1
                stop.wait(0.01)  # a steady stream of commits, some between a query's scans and some not
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            conn.close()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    outcomes = {"consistent": 0, "refused": 0}
    try:
        for _ in range(12):
            try:
                (total,) = spark.sql(_query(my_catalog, s)).collect()[0]
            except Exception as e:  # noqa: BLE001 - only the new, explained error is acceptable
                message = str(e)
                assert MIXED in message, message
                assert f"{s}.a" in message and f"{s}.b" in message and "binlog file" in message
                assert "htap failover <table> off" in message
                outcomes["refused"] += 1
                if outcomes["refused"] == 1:
                    print("refused:", message[message.find("source "):][:900])
                continue
            assert total == TOTAL, f"a mixed state: the two tables sum to {total}, not {TOTAL}"
            outcomes["consistent"] += 1
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors and transfers[0] > 0
    assert sum(outcomes.values()) == 12
    print(f"outcomes under {transfers[0]} transfers: {outcomes}")
