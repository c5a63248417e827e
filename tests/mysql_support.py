"""Fixtures for the MySQL/MariaDB source: a private MariaDB (services.py), a database and config per test.

Loaded by conftest.py (`pytest_plugins`). Each test gets its own database (the MySQL schema its
tables live in), its own `htap.toml` (kind mysql, a server id of its own) and warehouse.
"""

from __future__ import annotations

import pytest

from htap.connectors.mysql.server import master_position
from htap.seq import binlog_seq

from services import SERVICES
from workspace import MyWorkspace


def my_server():
    """This test process's MariaDB (started on first use)."""
    return SERVICES.mariadb


def my_connect(database: str | None = "test", **kwargs):
    return my_server().connect(database, **kwargs)


def master_seq(conn) -> int:
    """The server's current binlog position as a seq."""
    return binlog_seq(*master_position(conn))


@pytest.fixture
def mysql():
    conn = my_connect()
    yield conn
    conn.close()


@pytest.fixture
def my_workspace(tmp_path, mysql):
    ws = MyWorkspace(tmp_path, mysql, my_server())
    yield ws
    ws.close()


@pytest.fixture
def my_catalog(spark, my_workspace):
    """A Spark catalog name bound to this test's MySQL workspace."""
    name = f"c_{my_workspace.source}"
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.config", str(my_workspace.config))
    return name
