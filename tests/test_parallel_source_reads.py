"""Issue 14: failover reads of a large table split into key ranges on its first key column,
read by parallel Spark tasks at one exported source snapshot: no row lost or read twice at the
range edges, and a transfer between the first and the last range never shows half done."""

from __future__ import annotations

import threading

import psycopg2

from conftest import spark_confs, tune
from services import pg_dsn

ROWS = 200_000


def test_source_reads_of_a_large_table_use_parallel_ranges_at_one_snapshot(workspace, spark, catalog):
    ws = workspace
    tune(ws, source_range_rows=40_000)  # about five ranges
    t = f"{ws.schema}.accounts"
    ws.sql(f"CREATE TABLE {t} (id bigint PRIMARY KEY, balance bigint NOT NULL, note text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 100, 'n' || g FROM generate_series(1, {ROWS}) g")
    ws.sql(f"ANALYZE {t}")  # the split points come from the planner's statistics
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("accounts")
    ws.htap("failover", t, "on")
    total = 100 * ROWS

    scan = spark.sql(f"SELECT id, balance FROM {catalog}.{t}")
    assert scan.rdd.getNumPartitions() >= 4

    stop, moved, errors = threading.Event(), [0], []

    def transfers():  # from the first range to the last and back: the total never changes
        conn = psycopg2.connect(pg_dsn())
        try:
            while not stop.is_set():
                with conn, conn.cursor() as cur:
                    cur.execute(f"UPDATE {t} SET balance = balance - 7 WHERE id = 1")
                    cur.execute(f"UPDATE {t} SET balance = balance + 7 WHERE id = %s", (ROWS,))
                moved[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            conn.close()

    thread = threading.Thread(target=transfers, daemon=True)
    thread.start()
    try:
        # The aggregate's scan in key ranges too (by default it is one task: one source query).
        with spark_confs(spark, {"spark.htap.splitTableScans": "true"}):
            for _ in range(3):
                before = moved[0]
                rows = spark.sql(f"SELECT count(*), count(DISTINCT id), min(id), max(id), sum(balance) FROM {catalog}.{t}").collect()
                assert tuple(rows[0]) == (ROWS, ROWS, 1, ROWS, total)
                assert moved[0] > before  # transfers committed while the ranges were read
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors
    store = ws.store()
    try:
        assert store.recent_scans(ws.table("accounts").id, 1)[0].route == "source"
    finally:
        store.close()
