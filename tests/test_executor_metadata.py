"""Issue 15 item 3: executors only read the metadata store.

The driver takes a query's leases while planning, renews them while the query runs and releases
them when it ends; a task that finds a damaged delta reports it in its error, and the driver
checks the file and marks the table. Proven with executors whose view of a Postgres metadata
store is a role that may only SELECT (catalog option `executor_metadata`).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg2
import pytest

from conftest import normalized, wait_until
from services import SERVICES

from htap.conf import load_config
from htap.replica.leases import QUERY_HOLDER_PREFIX


@pytest.fixture
def metadata_db():
    """A metadata database of its own on the private Postgres, and a role that may only read it."""
    db = f"htap_meta_{uuid.uuid4().hex[:8]}"
    reader = f"htap_exec_{uuid.uuid4().hex[:6]}"
    admin = psycopg2.connect(SERVICES.postgres.dsn)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    admin.cursor().execute(f"CREATE ROLE {reader} LOGIN")
    yield SERVICES.postgres.url(db), reader, db
    admin.cursor().execute(f"DROP DATABASE {db} WITH (FORCE)")
    admin.cursor().execute(f"DROP ROLE {reader}")
    admin.close()


def use_postgres_metadata(ws, url: str, **replica: object) -> None:
    """Point the workspace's config at `url` (created there) and set replica keys."""
    from htap.replica.metadata import MetadataStore

    text = ws.config.read_text().replace('# metadata = ""', f'metadata = "{url}"')
    for key, value in replica.items():
        lines = [f"{key} = {value!r}" if line.startswith(f"{key} =") else line for line in text.splitlines()]
        text = "\n".join(lines) + "\n"
    ws.config.write_text(text)
    MetadataStore(url, create=True).close()


def reader_url(url: str, reader: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://{reader}@", 1)


def grant_select(db: str, reader: str) -> None:
    conn = psycopg2.connect(SERVICES.postgres.dsn.replace("dbname=test", f"dbname={db}"))
    conn.autocommit = True
    conn.cursor().execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
    conn.close()


def query_leases(ws, table_id: int):
    with ws.store() as store:
        return [p for p in store.live_pins(table_id) if p.holder.startswith(QUERY_HOLDER_PREFIX)]


def test_executors_with_a_select_only_role_read_and_the_driver_marks_damage_and_ends_leases(
    workspace, spark, metadata_db
):
    ws = workspace
    url, reader, db = metadata_db
    use_postgres_metadata(ws, url, pin_ttl_s=600.0)  # only a release can end a query's lease here
    for name in ("a", "b"):
        ws.sql(f"CREATE TABLE {ws.schema}.{name} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {ws.schema}.{name} SELECT g, 'v' || g FROM generate_series(1, 200) g")
        ws.htap("tables", "add", f"{ws.schema}.{name}")
    ws.start_service()
    for name in ("a", "b"):
        ws.wait_readable(name)
    grant_select(db, reader)
    executors = reader_url(url, reader)
    # The executors' role really cannot write (else this test could not fail).
    conn = psycopg2.connect(executors)
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        conn.cursor().execute("DELETE FROM pins")
    conn.close()

    cat = f"x_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
    spark.conf.set(f"spark.sql.catalog.{cat}.executor_metadata", executors)

    a, b = ws.table("a"), ws.table("b")
    got = spark.sql(f"SELECT x.id, x.v, y.v FROM {cat}.{ws.schema}.a x JOIN {cat}.{ws.schema}.b y ON x.id = y.id").collect()
    assert normalized(got) == normalized(ws.sql(f"SELECT x.id, x.v, y.v FROM {ws.schema}.a x JOIN {ws.schema}.b y USING (id)"))
    with ws.store() as store:
        assert [s.route for s in store.recent_scans(a.id, 1)] == ["replica"]
    # The query's leases end with it (their TTL is 600 s: the driver released them).
    wait_until(lambda: not query_leases(ws, a.id) and not query_leases(ws, b.id), None, "the query's leases to be released")

    # A damaged delta: the task fails the query naming it, cannot mark the table itself, and the
    # driver checks the file and marks the table; the next query fails over to the source.
    cfg = load_config(ws.config)
    with ws.store() as store:
        corrupt = cfg.warehouse / store.deltas(a.id)[0].path
    corrupt.write_bytes(b"this is not parquet" * 10)
    with pytest.raises(Exception) as failed:
        spark.sql(f"SELECT count(*), max(v) FROM {cat}.{ws.schema}.a").collect()
    assert str(corrupt) in str(failed.value)
    wait_until(lambda: ws.table("a").state == "unhealthy", None, "the driver to mark table a unhealthy")
    assert str(corrupt) in ws.table("a").error
    assert ws.table("b").state == "streaming"
    got = spark.sql(f"SELECT count(*), max(v) FROM {cat}.{ws.schema}.a").collect()
    assert [tuple(r) for r in got] == [(200, "v99")]
    with ws.store() as store:
        assert store.recent_scans(a.id, 1)[0].route == "source"
    wait_until(lambda: not query_leases(ws, a.id), None, "the failed query's leases to be released")


def test_the_driver_renews_a_running_querys_leases_past_their_ttl(workspace, spark, catalog, tmp_path):
    """SQLite store (executors open it read-only): a query that runs longer than pin_ttl_s keeps
    its lease, renewed by the driver, and loses it when it ends."""
    ws = workspace
    text = ws.config.read_text()
    ws.config.write_text("\n".join("pin_ttl_s = 20.0" if line.startswith("pin_ttl_s =") else line
                                   for line in text.splitlines()) + "\n")
    ws.sql(f"CREATE TABLE {ws.schema}.t (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {ws.schema}.t SELECT g, 'v' || g FROM generate_series(1, 100) g")
    ws.htap("tables", "add", f"{ws.schema}.t")
    ws.start_service()
    table = ws.wait_readable("t") and ws.table("t")

    go = tmp_path / "go"

    def hold(x: int) -> int:
        import os
        import time as t

        while not os.path.exists(str(go)):
            t.sleep(0.05)
        return x

    spark.udf.register(f"hold_{ws.source}", hold, "int")
    result: dict = {}

    def run():
        try:
            result["rows"] = spark.sql(
                f"SELECT count(*) FROM {catalog}.{ws.schema}.t WHERE hold_{ws.source}(id) > 0").collect()
        except Exception as e:  # noqa: BLE001 - reported below
            result["error"] = e

    runner = threading.Thread(target=run)
    runner.start()
    try:
        first = wait_until(lambda: query_leases(ws, table.id), None, "the running query's lease")
        holder, created = first[0].holder, min(p.created_at for p in first)
        # Still live (renewed) well past its own 20 s TTL while the query runs.
        wait_until(lambda: time.time() > created + 2 * 20.0, None, "two TTLs to pass")
        live = query_leases(ws, table.id)
        assert {p.holder for p in live} == {holder} and min(p.created_at for p in live) == created, (first, live)
    finally:
        go.touch()
        runner.join()
    assert "error" not in result, result.get("error")
    assert [tuple(r) for r in result["rows"]] == [(100,)]
    wait_until(lambda: not query_leases(ws, table.id), None, "the lease to end with the query")
