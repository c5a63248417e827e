"""Fixtures: the real Postgres, a private workspace per test, the ingest service, a Spark session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg2
import pytest

pytest_plugins = ["mysql_support"]

# Spark hands TIMESTAMP values to Python as naive local times; pin the local zone to UTC.
os.environ["TZ"] = "UTC"
time.tzset()

# Property tests: a quick profile by default, `HYPOTHESIS_PROFILE=thorough` for a long run.
from hypothesis import settings as _hypothesis_settings

_hypothesis_settings.register_profile("default", max_examples=25)
_hypothesis_settings.register_profile("thorough", max_examples=500)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

PG_DSN = os.environ.get("HTAP_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test")
HTAP = [sys.executable, "-m", "htap.cli"]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll `predicate` until it returns a truthy value; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def pg():
    conn = psycopg2.connect(PG_DSN, options="-c TimeZone=UTC")
    conn.autocommit = True
    yield conn
    conn.close()


def current_lsn(pg) -> int:
    from htap.connectors.postgres import lsn_to_int

    with pg.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()")
        return lsn_to_int(cur.fetchone()[0])


class Workspace:
    """A config, warehouse and source of its own (unique slot and publication), plus a schema."""

    def __init__(self, root: Path, pg):
        self.root = root
        self.pg = pg
        self.source = "s" + uuid.uuid4().hex[:10]
        self.schema = self.source  # a Postgres schema per test keeps tables apart
        self.config = root / "htap.toml"
        self.service: subprocess.Popen | None = None
        with pg.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {self.schema}")
        self.htap("init", "--dsn", PG_DSN, "--source", self.source)

    def htap(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([*HTAP, "--config", str(self.config), *args], capture_output=True, text=True, cwd=self.root)
        if check and r.returncode != 0:
            pytest.fail(f"htap {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def sql(self, statement: str, params=None):
        with self.pg.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def start_service(self) -> subprocess.Popen:
        log = open(self.root / "serve.log", "ab")
        self.service = subprocess.Popen([*HTAP, "--config", str(self.config), "serve"], stdout=log, stderr=log, cwd=self.root)
        return self.service

    def stop_service(self, sig=signal.SIGTERM) -> None:
        if self.service and self.service.poll() is None:
            self.service.send_signal(sig)
            self.service.wait(timeout=60)
        self.service = None

    def store(self):
        from htap.conf import load_config
        from htap.replica.metadata import MetadataStore

        return MetadataStore(load_config(self.config).metadata)

    def table(self, name: str):
        store = self.store()
        try:
            return store.get_table(self.source, self.schema, name)
        finally:
            store.close()

    def wait_readable(self, name: str, timeout: float = 60):
        return wait_until(lambda: self.table(name).readable, timeout, f"{name} to become readable")

    def wait_caught_up(self, name: str, timeout: float = 5.0) -> None:
        """Wait until the replica's max safe seq covers everything committed so far."""
        target = current_lsn(self.pg) - 1
        wait_until(lambda: (self.table(name).max_safe_seq or 0) >= target, timeout, f"{name} to reach {target}")

    def log(self) -> str:
        p = self.root / "serve.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def close(self) -> None:
        self.stop_service(signal.SIGKILL if self.service and self.service.poll() is None else signal.SIGTERM)
        slot = f"htap_{self.source}"
        with self.pg.cursor() as cur:
            # The killed service's walsender may not have noticed yet: end it, then drop the slot.
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND active",
                (slot,),
            )
            wait_until(lambda: not self.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)),
                       30, f"slot {slot} to become inactive")
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            cur.execute(f"DROP PUBLICATION IF EXISTS htap_{self.source}")
            cur.execute(f"DROP SCHEMA {self.schema} CASCADE")


@pytest.fixture
def workspace(tmp_path, pg):
    ws = Workspace(tmp_path, pg)
    yield ws
    ws.close()


@pytest.fixture(scope="session")
def spark():
    from htap.catalog.shim import spark_session

    # The catalog used by each test is registered at run time (see `catalog` below).
    session = spark_session("unused", "/nonexistent/htap.toml")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def catalog(spark, workspace):
    """A Spark catalog name bound to this test's workspace."""
    name = f"c_{workspace.source}"
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.config", str(workspace.config))
    return name


def normalize(value):
    import datetime as dt

    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def normalized(rows) -> list[tuple]:
    """Rows as sorted tuples of comparable values (Spark Rows and DB-API tuples alike)."""
    return sorted((tuple(normalize(v) for v in r) for r in rows), key=repr)
