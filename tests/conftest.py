"""Fixtures: a private Postgres (see services.py), a workspace per test, the ingest service, Spark."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import time
from pathlib import Path

import psycopg2
import pytest

from htap.catalog.shim import spark_confs, spark_session  # noqa: F401  (spark_confs: shared with tests)

from services import SERVICES, pg_dsn
from workspace import DEADLINE_S, HTAP, Workspace, current_lsn, wait_until  # noqa: F401  (shared with tests)

pytest_plugins = ["mysql_support"]

# The PostgreSQL JDBC driver (Debian: libpostgresql-jdbc-java): Spark's own JDBC source.
PG_JDBC_JAR = Path("/usr/share/java/postgresql.jar")

# Spark hands TIMESTAMP values to Python as naive local times; pin the local zone to UTC.
os.environ["TZ"] = "UTC"
time.tzset()

# Property tests: a quick profile by default, `HYPOTHESIS_PROFILE=thorough` for a long run.
from hypothesis import settings as _hypothesis_settings

_hypothesis_settings.register_profile("default", max_examples=25)
_hypothesis_settings.register_profile("thorough", max_examples=500)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Markers from the fixtures a test uses: `pytest -m unit`, `-m "not spark"`, `-m mysql`, ...
_FIXTURE_MARKERS = {
    "pg": "pg", "workspace": "pg", "catalog": "pg", "orders": "pg",
    "mysql": "mysql", "my_workspace": "mysql", "my_catalog": "mysql",
    "spark": "spark",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/unit/" in str(item.path).replace("\\", "/"):
            item.add_marker("unit")
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in _FIXTURE_MARKERS:
                item.add_marker(_FIXTURE_MARKERS[fixture])


# The unit tier (tests/unit) needs no service. Every process start is recorded (PEP 578 audit
# events), and a run of only unit tests fails at its end if it started a server, a JVM or Spark.
_SPAWNED: list[str] = []
_SERVICE_PROGRAMS = re.compile(r"(?:^|[/\s'\"(])(postgres|pg_ctl|initdb|mariadbd|mysqld|mariadb-install-db|java|javac|spark-submit)(?:['\"\s,)]|$)")
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"})


def _audit(event: str, args: tuple) -> None:
    if event in _SPAWN_EVENTS:
        _SPAWNED.append(repr(args))


sys.addaudithook(_audit)


def _check_unit_tier_started_nothing() -> None:
    started = [name for name, server in (("postgres", SERVICES._pg), ("mariadb", SERVICES._my)) if server is not None]
    spawned = sorted({m.group(1) for p in _SPAWNED for m in _SERVICE_PROGRAMS.finditer(p)})
    pyspark = sys.modules.get("pyspark")
    spark = pyspark is not None and pyspark.SparkContext._active_spark_context is not None
    assert not (started or spawned or spark), f"the unit tier must start no service: servers {started}, programs {spawned}, Spark {spark}"


@pytest.fixture(scope="session", autouse=True)
def _private_servers(request):
    """Stop the servers this process started (they start on first use) when the run ends."""
    yield SERVICES
    try:
        items = request.session.items
        if items and all(item.get_closest_marker("unit") for item in items):
            _check_unit_tier_started_nothing()
    finally:
        SERVICES.stop()


@pytest.fixture
def pg():
    conn = psycopg2.connect(pg_dsn(), options="-c TimeZone=UTC")
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def workspace(tmp_path, pg):
    ws = Workspace(tmp_path, pg, pg_dsn())
    yield ws
    ws.close()


@pytest.fixture(scope="session")
def spark():
    # The catalog used by each test is registered at run time (see `catalog` below). Spark's own
    # JDBC source (the PostgreSQL driver, installed by .ci/install.sh) is an oracle of some tests.
    from htap.catalog.shim import shim_jar

    jars = [str(shim_jar())] + ([str(PG_JDBC_JAR)] if PG_JDBC_JAR.exists() else [])
    session = spark_session("unused", "/nonexistent/htap.toml", **{"spark.jars": ",".join(jars)})
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


def pushed_plans(explain: str) -> list:
    """Every pushed plan an EXPLAIN text shows (`pushed={...}` of each HTAP scan), parsed."""
    from htap.rewrite.pushed import PushedPlan

    decoder, out, at = json.JSONDecoder(), [], 0
    while (at := explain.find("pushed=", at)) >= 0:
        raw, at = decoder.raw_decode(explain, at + len("pushed="))
        out.append(PushedPlan.from_dict(raw))
    return out


def top_aggregate(plan):
    """The aggregate a pushed plan computes at its top (under a limit, sort or projection), or None."""
    node = plan.root
    while node.op in ("limit", "sort", "project"):
        node = node.children[0]
    return node if node.op == "aggregate" else None


def complete_aggregate(plan) -> bool:
    """Whether the plan's top aggregate is final: computed whole, in one task."""
    agg = top_aggregate(plan)
    return agg is not None and not agg.partial and plan.one_task


def normalize(value):
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


def tune(ws, **settings) -> None:
    """Set replica keys in the workspace's htap.toml (they all exist there with defaults)."""
    lines = []
    for line in ws.config.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        lines.append(f"{key} = {settings[key]!r}" if key in settings and "=" in line else line)
    ws.config.write_text("\n".join(lines) + "\n")


