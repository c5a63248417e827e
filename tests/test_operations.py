"""Issue 11: clear operations. Removing a table or a source leaves nothing behind in the source
(no slot, no publication) or the replica; `htap status` shows what the slot retains; a Postgres
crash restart is reported as what it is, and the service resumes by itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg2

from htap import localpg
from htap.conf import load_config

from conftest import wait_until
from services import free_port
from workspace import Workspace


def slot_exists(ws) -> bool:
    return bool(ws.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (f"htap_{ws.source}",)))


def published(ws) -> set[str]:
    rows = ws.sql("SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (f"htap_{ws.source}",))
    return {r[0] for r in rows}


def source_status(ws) -> dict:
    status = json.loads(ws.htap("status", "--json").stdout)
    (src,) = [s for s in status["sources"] if s["source"] == ws.source]
    return src


def test_tables_remove_and_sources_drop_leave_nothing_behind(workspace):
    ws = workspace
    a, b = f"{ws.schema}.a", f"{ws.schema}.b"
    for t in (a, b):
        ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 20) g")
        ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("a")
    ws.wait_readable("b")
    cfg = load_config(ws.config)
    table_a = ws.table("a")
    assert published(ws) == {"a", "b"}
    a_files = [p for p in (cfg.warehouse / ws.source).iterdir() if p.name.endswith(f"-{table_a.id}")]
    assert a_files

    # Remove a table while the service streams: gone from the publication, the metadata, the disk.
    out = ws.htap("tables", "remove", a).stdout
    assert f"dropped {a} from publication htap_{ws.source}" in out
    assert published(ws) == {"b"}
    assert [t.name for t in ws.store().list_tables(ws.source)] == ["b"]
    assert not any(p.exists() for p in a_files)
    ws.sql(f"INSERT INTO {a} VALUES (100, 'x')")
    ws.sql(f"INSERT INTO {b} VALUES (100, 'x')")
    ws.wait_caught_up("b")  # the service goes on with the other table
    assert ws.service.poll() is None

    # A source cannot be dropped while the service streams it: the error says what to do.
    r = ws.htap("sources", "drop", ws.source, check=False)
    assert r.returncode == 2 and "stop `htap serve` first" in r.stderr
    assert slot_exists(ws)

    # The slot retains WAL while nobody reads it, and status says so.
    ws.stop_service()
    before = source_status(ws)
    ws.sql(f"INSERT INTO {b} SELECT g, repeat('x', 1000) FROM generate_series(1000, 3000) g")
    after = source_status(ws)
    assert after["retained_bytes"] > before["retained_bytes"]
    assert "inactive" in after["retention"] and "wal_status reserved" in after["retention"]
    assert "inactive" in ws.htap("status").stdout

    assert (cfg.warehouse / "_manifests" / f"{ws.source}.json").exists()
    out = ws.htap("sources", "drop", ws.source).stdout
    assert f"dropped replication slot htap_{ws.source}" in out and f"dropped publication htap_{ws.source}" in out
    assert not slot_exists(ws)
    assert not ws.sql("SELECT 1 FROM pg_publication WHERE pubname = %s", (f"htap_{ws.source}",))
    assert ws.store().list_tables() == []
    assert f"[sources.{ws.source}]" not in ws.config.read_text()
    assert not (cfg.warehouse / ws.source).exists()
    assert not (cfg.warehouse / "_manifests" / f"{ws.source}.json").exists()  # recover cannot bring it back


def test_postgres_crash_restart_is_reported_and_resumed(tmp_path):
    # A server of its own: the test crashes it (immediate shutdown = crash recovery at restart).
    data = Path(tempfile.mkdtemp(prefix="htap-test-crash-pg-"))
    data.chmod(0o755)
    port = free_port()
    dsn = localpg.start(data, port=port)
    pg = None
    ws = None
    try:
        pg = psycopg2.connect(dsn, options="-c TimeZone=UTC")
        pg.autocommit = True
        ws = Workspace(tmp_path, pg, dsn)
        t = f"{ws.schema}.t"
        ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
        ws.sql(f"INSERT INTO {t} SELECT generate_series(1, 10)")
        ws.htap("tables", "add", t)
        ws.start_service()
        ws.wait_readable("t")
        ws.wait_caught_up("t")

        pg.close()
        bindir = localpg._bindir()
        cmd = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True)
        wait_until(lambda: "was lost" in ws.log(), None, "the service to report the lost replication connection")
        localpg.start(data, port=port)
        pg = ws.pg = psycopg2.connect(dsn, options="-c TimeZone=UTC")
        pg.autocommit = True
        ws.sql(f"INSERT INTO {t} VALUES (11)")
        ws.wait_caught_up("t")
        log = ws.log()
        assert f"the replication connection to source {ws.source} was lost" in log
        assert "reconnects and resumes" in log
        assert ws.service.poll() is None
    finally:
        if ws is not None:
            ws.stop_service()
        if pg is not None:
            pg.close()
        localpg.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_demo_stop_stops_the_private_postgres_the_demo_left_running():
    from workspace import HTAP

    home = Path(tempfile.mkdtemp(prefix="htap-test-demo-"))
    home.chmod(0o755)
    data = home / ".htap-demo" / "pg"
    data.parent.mkdir()
    try:
        localpg.start(data, port=free_port())
        assert localpg.running(data)
        out = subprocess.run([*HTAP, "demo", "--stop"], cwd=home, capture_output=True, text=True, check=True).stdout
        assert "stopped the private Postgres" in out
        assert not localpg.running(data)
        out = subprocess.run([*HTAP, "demo", "--stop"], cwd=home, capture_output=True, text=True, check=True).stdout
        assert "no private Postgres runs" in out
    finally:
        localpg.stop(data)
        shutil.rmtree(home, ignore_errors=True)
