"""Checkpoints are written on a thread of their own while the stream goes on (htap.ingest.service):
the source is still never told a position the metadata store does not hold, and the replica
ends equal to the source.

A writer commits many small transactions (pgbench-like: an update of one row of a large table
and of a small hot table each) while the test reads the slot's confirmed position and then the
store's durable position, over and over: a confirmed position is never ahead of a durable
position read after it. The test waits on conditions; it never asserts how long anything took.
"""

from __future__ import annotations

import random
import threading

import psycopg2

from htap.seq import lsn_to_int
from services import pg_dsn
from workspace import wait_until


def test_the_source_is_told_only_durable_positions_while_checkpoints_overlap_the_stream(workspace):
    ws = workspace
    big, hot = f"{ws.schema}.accounts", f"{ws.schema}.branches"
    ws.sql(f"CREATE TABLE {big} (id int PRIMARY KEY, balance int, filler text)")
    ws.sql(f"INSERT INTO {big} SELECT g, 0, repeat('x', 40) FROM generate_series(1, 20000) g")
    ws.sql(f"CREATE TABLE {hot} (id int PRIMARY KEY, balance int)")
    ws.sql(f"INSERT INTO {hot} SELECT g, 0 FROM generate_series(1, 5) g")
    for t in (big, hot):
        ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("accounts")
    ws.wait_readable("branches")

    stop = threading.Event()
    committed = []

    def write() -> None:
        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = False
        rnd = random.Random(13)
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    cur.execute(f"UPDATE {big} SET balance = balance + 1 WHERE id = %s", (rnd.randint(1, 20000),))
                    cur.execute(f"UPDATE {hot} SET balance = balance + 1 WHERE id = %s", (rnd.randint(1, 5),))
                    if rnd.random() < 0.05:
                        cur.execute(f"DELETE FROM {big} WHERE id = %s", (rnd.randint(1, 20000),))
                    conn.commit()
                    committed.append(1)
        finally:
            conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    slot = f"htap_{ws.source}"
    checked = 0
    try:
        with ws.store() as store:
            while checked < 300 or len(committed) < 2000:
                [(lsn,)] = ws.sql("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                confirmed = lsn_to_int(lsn) if lsn else 0
                durable = store.source_position(ws.source) or 0
                # The service confirms `position + 1` (the server's "flushed up to, exclusive").
                assert confirmed - 1 <= durable, f"the source was told {confirmed - 1}, the store holds {durable}"
                checked += 1
                assert writer.is_alive(), "the writer stopped"
    finally:
        stop.set()
        writer.join()
    ws.wait_caught_up("accounts")
    ws.wait_caught_up("branches")
    wait_until(lambda: "checkpoint timing:" in ws.log(), None, "the checkpoints' timing in the service's log")
    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
