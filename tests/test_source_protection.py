"""Issue 15, source protection: a slot that lost WAL the replica needed (Postgres removed it past
`max_slot_wal_keep_size`), or that was dropped, is detected; the source's tables are copied again
from a new slot while their reads fail over to the source, and the replica ends up equal to
Postgres: the changes made while the slot was lost are not silently skipped."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import psycopg2
import pyarrow as pa
import pytest

from htap import localpg
from htap.conf import load_config
from htap.ingest.service import SourceIngest
from htap.pushdown.replica_reader import read_plan
from htap.pushdown.routing import decide
from htap.replica.metadata import MetadataStore
from htap.replica.read_plans import pin_and_plan, queryable_window
from htap.rewrite.pushed import table_plan

from conftest import normalized, wait_until
from services import PG_SETTINGS, free_port
from test_metrics import get, scrape, set_service
from workspace import Workspace


@pytest.fixture
def small_slot_pg():
    """A private Postgres that invalidates a slot holding more than 1 MB of WAL beyond the
    segments it must keep anyway (`max_slot_wal_keep_size`)."""
    data = Path(tempfile.mkdtemp(prefix="htap-test-slot-pg-"))
    data.chmod(0o755)
    dsn = localpg.start(data, port=free_port(), settings={**PG_SETTINGS, "max_slot_wal_keep_size": "1MB"})
    conn = psycopg2.connect(dsn, options="-c TimeZone=UTC")
    conn.autocommit = True
    try:
        yield conn, dsn
    finally:
        conn.close()
        localpg.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def replica_rows(ws, name: str) -> list[tuple]:
    cfg = load_config(ws.config)
    with MetadataStore(cfg.metadata) as store:
        table = store.get_table(ws.source, ws.schema, name)
        batches = []
        for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
            batches += read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan,
                                 table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema)
    return sorted(normalized(tuple(r.values()) for r in pa.Table.from_batches(batches, schema=table.arrow_schema).to_pylist()))


def source_rows(ws, name: str) -> list[tuple]:
    return sorted(normalized(ws.sql(f"SELECT * FROM {ws.schema}.{name}")))


def slot_status(ws) -> str | None:
    rows = ws.sql("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (f"htap_{ws.source}",))
    return rows[0][0] if rows else None


def change_while_stopped(ws) -> None:
    """Changes only the lost WAL holds: skipping them would leave the replica wrong."""
    ws.sql(f"UPDATE {ws.schema}.t SET v = v || '-changed' WHERE id % 3 = 0")
    ws.sql(f"DELETE FROM {ws.schema}.t WHERE id % 7 = 0")
    ws.sql(f"INSERT INTO {ws.schema}.t SELECT g, 'new' || g FROM generate_series(1001, 1100) g")


def generate_until_lost(ws) -> bool:
    """Write WAL (a table outside the publication), switch segments and checkpoint: once the
    slot holds more than max_slot_wal_keep_size, the checkpoint removes its WAL and invalidates it."""
    ws.sql(f"CREATE TABLE IF NOT EXISTS {ws.schema}.filler (id int, pad text)")
    ws.sql(f"INSERT INTO {ws.schema}.filler SELECT g, repeat('x', 2000) FROM generate_series(1, 4000) g")
    ws.sql("SELECT pg_switch_wal()")
    ws.sql("CHECKPOINT")
    return slot_status(ws) == "lost"


def start_streaming(ws, rows: int = 500) -> None:
    ws.sql(f"CREATE TABLE {ws.schema}.t (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {ws.schema}.t SELECT g, 'v' || g FROM generate_series(1, {rows}) g")
    ws.htap("tables", "add", f"{ws.schema}.t")
    ws.start_service()
    ws.wait_readable("t")
    ws.sql(f"UPDATE {ws.schema}.t SET v = 'streamed' WHERE id <= 5")
    ws.wait_caught_up("t")
    assert replica_rows(ws, "t") == source_rows(ws, "t")


def test_a_slot_invalidated_by_max_slot_wal_keep_size_is_recovered_by_copying_again(tmp_path, small_slot_pg):
    pg, dsn = small_slot_pg
    ws = Workspace(tmp_path, pg, dsn)
    try:
        port = free_port()
        set_service(ws, metrics_address=f"127.0.0.1:{port}", source_check_interval_s=0.2)
        start_streaming(ws)
        ws.stop_service()
        before = ws.table("t")
        change_while_stopped(ws)

        wait_until(lambda: generate_until_lost(ws), None, "the slot to be invalidated", interval=0)
        status = ws.htap("status").stdout
        assert "wal_status lost" in status and "was invalidated" in status

        ws.start_service()
        ws.wait_readable("t")
        ws.wait_caught_up("t")
        assert replica_rows(ws, "t") == source_rows(ws, "t")  # nothing skipped, nothing left over
        after = ws.table("t")
        assert after.copy_seq > before.max_safe_seq  # a new copy, at a snapshot after the loss
        log = ws.log()
        assert f"source {ws.source}: replication slot htap_{ws.source} was invalidated (wal_status lost)" in log
        assert f"dropped the lost replication slot htap_{ws.source}; copying 1 table(s) again ({ws.schema}.t)" in log
        assert slot_status(ws) == "reserved"

        # The new slot streams on; the metrics say what happened.
        ws.sql(f"UPDATE {ws.schema}.t SET v = 'after' WHERE id = 1")
        ws.wait_caught_up("t")
        assert replica_rows(ws, "t") == source_rows(ws, "t")
        url = f"http://127.0.0.1:{port}"
        src = frozenset({("source", ws.source)})
        m = wait_until(lambda: (m := scrape(url))[("htap_source_log_lost", src)] == 0 and m, None, "the new slot in the metrics")
        assert m[("htap_source_log_recoveries_total", src)] == 1
        assert get(url + "/health")[0] == 200
    finally:
        ws.close()


def test_a_slot_invalidated_while_the_service_streams_is_recovered(tmp_path, small_slot_pg):
    # The service is frozen (SIGSTOP) while connected, so its slot falls behind; Postgres ends
    # the slot's walsender and invalidates it. Thawed, the service finds the connection lost,
    # reconnects, finds the slot lost and copies the table again.
    pg, dsn = small_slot_pg
    ws = Workspace(tmp_path, pg, dsn)
    try:
        start_streaming(ws)
        ws.service.send_signal(signal.SIGSTOP)
        try:
            change_while_stopped(ws)
            wait_until(lambda: generate_until_lost(ws), None, "the slot to be invalidated", interval=0)
        finally:
            ws.service.send_signal(signal.SIGCONT)
        wait_until(lambda: "copying 1 table(s) again" in ws.log(), None, "the service to copy the table again")
        ws.wait_readable("t")
        ws.wait_caught_up("t")
        assert replica_rows(ws, "t") == source_rows(ws, "t")
        assert ws.service.poll() is None
    finally:
        ws.close()


def test_a_dropped_slot_fails_reads_over_and_copies_again(workspace):
    ws = workspace
    start_streaming(ws)
    slot = f"htap_{ws.source}"

    # The service finds the slot gone when it starts, and copies the table again.
    ws.stop_service()
    change_while_stopped(ws)
    ws.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
    ws.start_service()
    wait_until(lambda: "copying 1 table(s) again" in ws.log(), None, "the service to copy the table again")
    ws.wait_readable("t")
    ws.wait_caught_up("t")
    assert replica_rows(ws, "t") == source_rows(ws, "t")
    assert f"replication slot {slot} does not exist any more (dropped?)" in ws.log()

    # The detection alone (what `htap serve` does first): the table is to be copied again, and
    # until it is, its reads go to the source, saying why.
    ws.stop_service()
    ws.sql(f"UPDATE {ws.schema}.t SET v = 'second' WHERE id % 2 = 0")
    ws.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
    cfg = load_config(ws.config)
    ingest = SourceIngest(cfg, cfg.source(ws.source), threading.Event())
    ingest.protect_log()
    table = ws.table("t")
    assert table.state == "pending" and "does not exist any more" in table.error
    with ws.store() as store:
        route = decide(table, queryable_window(store, table, cfg.window_s), time.time())
    assert route.target == "source" and f"replication slot {slot} does not exist any more" in route.reason
    ingest.protect_log()  # again (as after a crash before the new slot): same outcome
    assert ws.table("t").state == "pending"
    ingest.store.close()

    ws.start_service()
    ws.wait_readable("t")
    ws.wait_caught_up("t")
    assert replica_rows(ws, "t") == source_rows(ws, "t")
