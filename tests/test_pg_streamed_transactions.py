"""Issue 13: big transactions that Postgres streams while they run (pgoutput protocol 2,
`streaming 'on'`). The role the stream connects as has `logical_decoding_work_mem` at its
minimum (64 kB), so every transaction past a few hundred rows arrives in stream blocks,
interleaved with the commits of other transactions.

The stream delivers a streamed transaction only at its Stream Commit, in commit order, without
what its rolled-back subtransactions did; an aborted one never. Through the service: nothing of
an open transaction is visible, a kill -9 in the middle of one loses and duplicates nothing (the
server streams it again), and the source is never told a position the store does not hold."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import psycopg2
import pyarrow as pa
import pytest

from htap.seq import lsn_to_int
from services import pg_dsn
from workspace import Workspace, wait_slot_released, wait_until

ROLE = "htap_streamer"


@pytest.fixture
def streamer_dsn(pg) -> str:
    """A DSN whose sessions (the walsender too) stream any transaction past 64 kB of changes."""
    with pg.cursor() as cur:
        cur.execute(f"SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'")
        if not cur.fetchone():
            cur.execute(f"CREATE ROLE {ROLE} LOGIN SUPERUSER")
        cur.execute(f"ALTER ROLE {ROLE} SET logical_decoding_work_mem = '64kB'")
    return " ".join(p for p in pg_dsn().split() if not p.startswith("user=")) + f" user={ROLE}"


def streamed_transactions(pg, slot: str) -> int:
    with pg.cursor() as cur:
        cur.execute("SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    return row[0] if row else 0


def replica_rows(ws, name: str) -> list[tuple]:
    """The replica's rows of a table at its max safe seq, by key."""
    from htap.conf import load_config
    from htap.pushdown.replica_reader import read_plan
    from htap.replica.metadata import MetadataStore
    from htap.replica.read_plans import pin_and_plan
    from htap.rewrite.pushed import table_plan

    cfg = load_config(ws.config)
    store = MetadataStore(cfg.metadata)
    try:
        table = store.get_table(ws.source, ws.schema, name)
        batches = []
        for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
            batches += read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan,
                                 table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema)
    finally:
        store.close()
    got = pa.Table.from_batches(batches, schema=table.arrow_schema).sort_by(table.key[0])
    return [tuple(r.values()) for r in got.to_pylist()]


def test_streamed_transactions_arrive_whole_at_their_commit_without_what_was_rolled_back(pg, streamer_dsn):
    from htap.conf import PostgresConfig
    from htap.connectors.changes import Begin, Commit, RowBatch, RowChange
    from htap.connectors.postgres import PostgresStream

    name = f"streamed_{uuid.uuid4().hex[:10]}"
    t = f"public.{name}"
    with pg.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE {t}")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    big = psycopg2.connect(pg_dsn())
    with big.cursor() as b, pg.cursor() as small:
        b.execute(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 4000) g")
        small.execute(f"INSERT INTO {t} VALUES (-1, 'committed first')")  # between two stream blocks
        b.execute("SAVEPOINT a")
        b.execute(f"UPDATE {t} SET v = 'rolled back' WHERE id <= 2000")
        b.execute("SAVEPOINT inner_one")
        b.execute(f"DELETE FROM {t} WHERE id > 3000")
        b.execute("RELEASE SAVEPOINT inner_one")
        b.execute("ROLLBACK TO SAVEPOINT a")  # the update and the released delete: both gone
        b.execute("SAVEPOINT kept")
        b.execute(f"UPDATE {t} SET v = v || '!' WHERE id % 3 = 0")
        b.execute("RELEASE SAVEPOINT kept")
        b.execute(f"UPDATE {t} SET id = id + 100000 WHERE id BETWEEN 1 AND 5")  # key changes: row by row
        b.execute(f"DELETE FROM {t} WHERE id > 3500")
        big.commit()
        b.execute(f"INSERT INTO {t} SELECT g, 'aborted' FROM generate_series(10001, 14000) g")
        big.rollback()
        small.execute(f"INSERT INTO {t} VALUES (-2, 'committed last')")
        small.execute(f"SELECT id::text, v FROM {t}")
        want = dict(small.fetchall())
    big.close()

    stream = PostgresStream(PostgresConfig(name=name, dsn=streamer_dsn, slot=name, publication=name), 0)
    rows: dict = {}
    sizes, seqs = [], []
    try:
        assert stream.streaming
        deadline = time.monotonic() + 120
        while len(sizes) < 3 and time.monotonic() < deadline:
            event = stream.poll(1.0)
            if isinstance(event, Begin):
                n = 0
                seqs.append(event.seq)
            elif isinstance(event, RowBatch):
                n += len(event)
                for key, v in zip(*(c.to_pylist() for c in event.columns)):
                    rows.pop(key, None) if event.op == "delete" else rows.__setitem__(key, v)
            elif isinstance(event, RowChange):
                n += 1
                if event.old is not None:
                    rows.pop(event.old[0], None)
                rows.pop(event.values[0], None) if event.op == "delete" else rows.__setitem__(event.values[0], event.values[1])
            elif isinstance(event, Commit):
                sizes.append(n)
        assert not stream.streamed, "an aborted transaction is forgotten"
    finally:
        stream.close()
        with pg.cursor() as cur:
            wait_slot_released(cur, name)
            streamed = streamed_transactions(pg, name)
            cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            cur.execute(f"DROP PUBLICATION {name}")
            cur.execute(f"DROP TABLE {t}")
    assert streamed >= 2, "the big transactions were streamed"
    # The small commit; the big one: 4000 inserts, 1333 updates, 5 key changes, 505 deletes (the moved rows too); the last.
    assert sizes == [1, 4000 + 1333 + 5 + 505, 1]
    assert seqs == sorted(seqs)
    assert rows == want


def test_kill_during_a_streamed_transaction_loses_and_duplicates_nothing(tmp_path, pg, streamer_dsn):
    ws = Workspace(tmp_path, pg, streamer_dsn)
    try:
        t = f"{ws.schema}.big"
        ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int)")
        ws.sql(f"INSERT INTO {t} SELECT g, 'copied', 0 FROM generate_series(1, 1000) g")
        ws.htap("tables", "add", t)
        ws.start_service()
        ws.wait_readable("big")
        slot = f"htap_{ws.source}"

        big = psycopg2.connect(pg_dsn())
        stop = threading.Event()
        errors: list[str] = []

        def watch() -> None:
            """The source is never told a position the store does not hold."""
            conn = psycopg2.connect(pg_dsn())
            conn.autocommit = True
            try:
                with ws.store() as store, conn.cursor() as cur:
                    while not stop.is_set():
                        cur.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                        row = cur.fetchone()
                        confirmed = lsn_to_int(row[0]) if row and row[0] else 0
                        durable = store.source_position(ws.source) or 0
                        if confirmed - 1 > durable:
                            errors.append(f"the source was told {confirmed - 1}, the store holds {durable}")
                        time.sleep(0.02)
            finally:
                conn.close()

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with big.cursor() as b:
                b.execute(f"INSERT INTO {t} SELECT g, 'new', 1 FROM generate_series(1001, 6000) g")
                b.execute(f"UPDATE {t} SET n = n + 10 WHERE id <= 3000")
                # Streamed to the service while open; small commits meanwhile become visible, its
                # own changes do not: the replica equals the source at a snapshot of now.
                wait_until(lambda: streamed_transactions(pg, slot) or ws.sql(
                    "SELECT stream_count > 0 FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,))[0][0],
                    None, "the open transaction to be streamed")
                ws.sql(f"INSERT INTO {t} VALUES (-1, 'small', 0)")
                ws.wait_caught_up("big")
                assert replica_rows(ws, "big") == [(-1, "small", 0)] + [(i, "copied", 0) for i in range(1, 1001)]
                ws.stop_service(signal.SIGKILL)  # in the middle of the streamed transaction
                b.execute("SAVEPOINT s")
                b.execute(f"DELETE FROM {t} WHERE id % 2 = 0")
                b.execute("ROLLBACK TO SAVEPOINT s")
                b.execute(f"DELETE FROM {t} WHERE id % 7 = 0")
                b.execute(f"UPDATE {t} SET v = 'moved', id = id + 100000 WHERE id BETWEEN 10 AND 20")
            big.commit()
            with big.cursor() as b:
                b.execute(f"INSERT INTO {t} SELECT g, 'aborted', 2 FROM generate_series(7001, 12000) g")
            big.rollback()
            ws.start_service()
            with big.cursor() as b:  # streamed while the service restarts, killed again before its commit
                b.execute(f"UPDATE {t} SET n = n + 100 WHERE id > 4000")
                time.sleep(1.0)
                ws.stop_service(signal.SIGKILL)
                b.execute(f"INSERT INTO {t} SELECT g, 'late', 3 FROM generate_series(20001, 24000) g")
            big.commit()
            ws.start_service()
            ws.wait_caught_up("big")
        finally:
            stop.set()
            watcher.join()
            big.close()
        assert not errors, errors[0]
        r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        [(count,)] = ws.sql(f"SELECT count(*) FROM {t}")
        assert count > 6000
        assert "Traceback" not in ws.log()
    finally:
        ws.close()
