"""Fixtures for the MySQL/MariaDB source: the real MariaDB, a database and config per test, Spark.

Loaded by conftest.py (`pytest_plugins`). Each test gets its own database (the MySQL schema its
tables live in), its own `htap.toml` (kind mysql, a server id of its own) and warehouse.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pymysql
import pytest

from conftest import HTAP, wait_until

MY_HOST = os.environ.get("HTAP_TEST_MY_HOST", "127.0.0.1")
MY_PORT = int(os.environ.get("HTAP_TEST_MY_PORT", "3306"))
MY_USER = os.environ.get("HTAP_TEST_MY_USER", "root")
MY_PASSWORD = os.environ.get("HTAP_TEST_MY_PASSWORD", "")
MY_DSN = f"mysql://{MY_USER}:{MY_PASSWORD}@{MY_HOST}:{MY_PORT}/test"


def my_connect(database: str | None = "test", **kwargs):
    settings = dict(
        host=MY_HOST, port=MY_PORT, user=MY_USER, password=MY_PASSWORD, database=database, autocommit=True,
        init_command="SET time_zone = '+00:00'",
    )
    return pymysql.connect(**{**settings, **kwargs})


def master_seq(conn) -> int:
    """The server's current binlog position as a seq."""
    from htap.connectors.mysql import encode_seq, master_position

    return encode_seq(*master_position(conn))


@pytest.fixture
def mysql():
    conn = my_connect()
    yield conn
    conn.close()


class MyWorkspace:
    """A config, warehouse and source of their own, plus a MariaDB database for the tables."""

    def __init__(self, root: Path, conn):
        self.root = root
        self.conn = conn
        self.source = "m" + uuid.uuid4().hex[:10]
        self.schema = self.source  # the MySQL database holding this test's tables
        self.config = root / "htap.toml"
        self.service: subprocess.Popen | None = None
        self.sql(f"CREATE DATABASE {self.schema}")
        self.htap("init", "--kind", "mysql", "--dsn", f"mysql://{MY_USER}:{MY_PASSWORD}@{MY_HOST}:{MY_PORT}/{self.schema}",
                  "--source", self.source)

    def htap(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([*HTAP, "--config", str(self.config), *args], capture_output=True, text=True, cwd=self.root)
        if check and r.returncode != 0:
            pytest.fail(f"htap {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def sql(self, statement: str, params=None):
        with self.conn.cursor() as cur:
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

    def wait_caught_up(self, name: str, timeout: float = 10.0) -> None:
        """Wait until the replica's max safe seq covers every commit the server has logged so far."""
        target = master_seq(self.conn)
        wait_until(lambda: (self.table(name).max_safe_seq or 0) >= target, timeout, f"{name} to reach {target}")

    def log(self) -> str:
        p = self.root / "serve.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def close(self) -> None:
        self.stop_service(signal.SIGKILL if self.service and self.service.poll() is None else signal.SIGTERM)
        self.sql(f"DROP DATABASE IF EXISTS {self.schema}")


@pytest.fixture
def my_workspace(tmp_path, mysql):
    ws = MyWorkspace(tmp_path, mysql)
    yield ws
    ws.close()


@pytest.fixture
def my_catalog(spark, my_workspace):
    """A Spark catalog name bound to this test's MySQL workspace."""
    name = f"c_{my_workspace.source}"
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.config", str(my_workspace.config))
    return name
