"""Test workspaces: a config, a warehouse and a source of their own, plus the ingest service.

One base class holds what every source kind shares (the `htap` CLI, the service process, the
metadata store, waiting for a table); a subclass per source kind sets up its source and knows
how far the source has committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from htap.conf import load_config
from htap.connectors.mysql.server import master_position
from htap.replica.metadata import MetadataStore
from htap.seq import binlog_seq, lsn_to_int

HTAP = [sys.executable, "-m", "htap.app.cli"]

# How long a test waits for a condition before it fails. Generous on purpose: a test waits on
# conditions, never asserts that something happened "in time", so a slow or loaded machine
# only makes a run slower, never red.
DEADLINE_S = float(os.environ.get("HTAP_TEST_DEADLINE_S", "300"))


def wait_until(predicate, timeout: float | None, what, interval: float = 0.05):
    """Poll `predicate` until it returns a truthy value; fail naming `what` (a string, or a
    callable giving it then: the state that was waited on) after `timeout` s (None: DEADLINE_S)."""
    timeout = DEADLINE_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


@contextmanager
def live_delta_files(cfg, table_id: int) -> Iterator[list]:
    """The live deltas of a table (htap.replica.models.Delta), held the way readers hold them:
    under a lease taken first (MetadataStore.pin), so that the running service's compaction,
    which may retire them meanwhile, deletes none of their files until the block ends. Listing
    the deltas and then reading their files without one races with compaction ("No files found")."""
    with MetadataStore(cfg.metadata) as store:
        pin, _ = store.pin(table_id, 0, ttl_s=DEADLINE_S, holder="test reader")
        try:
            yield store.deltas(table_id)  # every one live now, retired after the pin or not
        finally:
            store.release_pin(pin.id)


def wait_slot_released(cur, slot: str) -> None:
    """Wait until the walsender lets go of replication slot `slot` (shortly after its stream
    closes), so that it can be dropped. `cur`: a cursor of an ordinary connection."""

    def released() -> bool:
        cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        return not cur.fetchone()[0]

    wait_until(released, None, f"the walsender to release slot {slot}", interval=0.1)


class BaseWorkspace:
    """What every source kind's workspace shares. `schema` is where the source's tables live."""

    prefix = "w"

    def __init__(self, root: Path):
        self.root = root
        self.source = self.prefix + uuid.uuid4().hex[:10]
        self.schema = self.source
        self.config = root / "htap.toml"
        self.service: subprocess.Popen | None = None

    # --- the CLI and the service ------------------------------------------------------------------

    def htap(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([*HTAP, "--config", str(self.config), *args], capture_output=True, text=True, cwd=self.root)
        if check and r.returncode != 0:
            pytest.fail(f"htap {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def start_service(self) -> subprocess.Popen:
        log = open(self.root / "serve.log", "ab")
        self.service = subprocess.Popen([*HTAP, "--config", str(self.config), "serve"], stdout=log, stderr=log, cwd=self.root)
        return self.service

    def stop_service(self, sig=signal.SIGTERM) -> None:
        if self.service and self.service.poll() is None:
            self.service.send_signal(sig)
            self.service.wait(timeout=DEADLINE_S)
        self.service = None

    def log(self) -> str:
        p = self.root / "serve.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # --- the replica ------------------------------------------------------------------------------

    def store(self) -> MetadataStore:
        return MetadataStore(load_config(self.config).metadata)

    def table(self, name: str, schema: str | None = None):
        with self.store() as store:
            return store.get_table(self.source, schema or self.schema, name)

    def wait_readable(self, name: str, timeout: float | None = None):
        return wait_until(lambda: self.table(name).readable, timeout, f"{name} to become readable")

    def wait_seq(self, name: str, seq: int, timeout: float | None = None, schema: str | None = None) -> None:
        """Wait until the replica's max safe seq of a table reaches `seq`."""
        def what() -> str:
            t = self.table(name, schema)
            return f"{name} to reach seq {seq} (it is {t.state} at seq {t.max_safe_seq}{': ' + t.error if t.error else ''})"
        wait_until(lambda: (self.table(name, schema).max_safe_seq or -1) >= seq, timeout, what)

    def source_seq(self) -> int:
        """The seq of the source's newest commit (what `wait_caught_up` waits for)."""
        raise NotImplementedError

    def wait_caught_up(self, name: str, timeout: float | None = None) -> None:
        """Wait until the replica's max safe seq covers everything the source committed so far."""
        self.wait_seq(name, self.source_seq(), timeout)

    def close(self) -> None:
        self.stop_service(signal.SIGKILL if self.service and self.service.poll() is None else signal.SIGTERM)


class Workspace(BaseWorkspace):
    """A Postgres source: a schema of its own, and its own slot and publication."""

    prefix = "s"

    def __init__(self, root: Path, pg, dsn: str, warehouse: str = "warehouse"):
        super().__init__(root)
        self.pg = pg
        with pg.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {self.schema}")
        self.htap("init", "--dsn", dsn, "--source", self.source, "--warehouse", warehouse)

    def sql(self, statement: str, params=None):
        with self.pg.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def source_seq(self) -> int:
        # The replica seq equal to "everything committed so far" is the current LSN - 1.
        return current_lsn(self.pg) - 1

    def close(self) -> None:
        super().close()
        slot = f"htap_{self.source}"
        with self.pg.cursor() as cur:
            # The killed service's walsender may not have noticed yet: end it, then drop the slot.
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND active",
                (slot,),
            )
            wait_until(lambda: not self.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)),
                       None, f"slot {slot} to become inactive")
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            cur.execute(f"DROP PUBLICATION IF EXISTS htap_{self.source}")
            cur.execute(f"DROP SCHEMA {self.schema} CASCADE")


def current_lsn(pg) -> int:
    with pg.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()")
        return lsn_to_int(cur.fetchone()[0])


class MyWorkspace(BaseWorkspace):
    """A MySQL/MariaDB source: a database of its own (the MySQL schema its tables live in)."""

    prefix = "m"

    def __init__(self, root: Path, conn, server):
        super().__init__(root)
        self.conn = conn
        self.sql(f"CREATE DATABASE {self.schema}")
        self.htap("init", "--kind", "mysql", "--dsn",
                  f"mysql://{server.user}:{server.password}@{server.host}:{server.port}/{self.schema}",
                  "--source", self.source)

    def sql(self, statement: str, params=None):
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def source_seq(self) -> int:
        return binlog_seq(*master_position(self.conn))

    def close(self) -> None:
        super().close()
        self.sql(f"DROP DATABASE IF EXISTS {self.schema}")


class DebeziumWorkspace(BaseWorkspace):
    """A Debezium source reading events from a file or folder (tables live in the events' schemas)."""

    prefix = "d"

    def __init__(self, root: Path, events_path: Path):
        super().__init__(root)
        self.htap("init", "--kind", "debezium", "--dsn", str(events_path), "--source", self.source)
