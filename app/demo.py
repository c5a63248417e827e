"""`htap demo`: the whole path on an embedded default, in about a minute.

Uses the local Postgres if it has wal_level=logical, else starts a private one under
./.htap-demo/pg. Creates a sample table, runs the ingest service, queries the replica through
Spark SQL (showing the pushed plan), commits a change in Postgres and shows it in Spark.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import psycopg2

from htap import localpg
from htap.app.cli import htap_command
from htap.app.cli import main as htap
from htap.catalog.shim import spark_session
from htap.conf import load_config
from htap.errors import SourceError
from htap.ingest.service import serve
from htap.replica.metadata import MetadataStore
from htap.seq import lsn_to_int

DEFAULT_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
DEMO_DIR = Path(".htap-demo")
PRIVATE_PORT = 54329


def _logical_dsn(dsn: str | None) -> str:
    candidate = dsn or DEFAULT_DSN
    try:
        conn = psycopg2.connect(candidate)
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            level = cur.fetchone()[0]
        conn.close()
        if level == "logical":
            return candidate
        reason = f"wal_level is {level!r}"
    except psycopg2.OperationalError as e:
        reason = str(e).strip().splitlines()[0]
    if dsn:
        raise SourceError(f"cannot use {dsn} for the demo: {reason}")
    print(f"[demo] local Postgres not usable for CDC ({reason}); starting a private one in {DEMO_DIR / 'pg'}")
    return localpg.start(DEMO_DIR / "pg", PRIVATE_PORT)


def stop_private_postgres() -> int:
    """`htap demo --stop` (and `make clean`): stop the private Postgres an earlier demo started,
    which keeps running after the demo so that `htap status` and Spark can still be tried."""
    pg = DEMO_DIR / "pg"
    if not localpg.running(pg):
        print(f"[demo] no private Postgres runs in {pg}")
        return 0
    localpg.stop(pg)
    if localpg.running(pg):
        raise SourceError(f"the demo's private Postgres in {pg} did not stop; see {pg / 'server.log'}")
    print(f"[demo] stopped the private Postgres in {pg}")
    return 0


def _wait(what: str, predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SourceError(f"timed out waiting for {what}; see the log above")
        time.sleep(0.2)


def run_demo(dsn: str | None) -> int:
    logging.getLogger("htap").setLevel(logging.WARNING)
    dsn = _logical_dsn(dsn)
    print(f"[demo] source: {dsn}")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    # A previous demo run may have left its slot behind; start clean.
    cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN ('htap_shop', 'htap_demo')"
                " AND NOT active")  # htap_demo: the slot of demos before the source was named shop
    cur.execute("DROP PUBLICATION IF EXISTS htap_shop, htap_demo")
    cur.execute("CREATE SCHEMA IF NOT EXISTS htap_demo; DROP TABLE IF EXISTS htap_demo.orders")
    cur.execute(
        "CREATE TABLE htap_demo.orders (id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2),"
        " placed_at timestamptz NOT NULL)"
    )
    cur.execute(
        "INSERT INTO htap_demo.orders SELECT g, (ARRAY['emea','amer','apac'])[1 + g % 3], (g % 997) * 1.25,"
        " now() - g * interval '1 minute' FROM generate_series(1, 100000) g"
    )
    print("[demo] created htap_demo.orders with 100,000 rows")

    work = DEMO_DIR / "workspace"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "htap.toml"
    for stale in work.glob("warehouse"):
        import shutil

        shutil.rmtree(stale)
    htap(["--config", str(config), "init", "--dsn", dsn, "--source", "shop", "--force"])
    htap(["--config", str(config), "tables", "add", "htap_demo.orders"])
    cfg = load_config(config)
    stop = threading.Event()
    service = threading.Thread(target=serve, args=(cfg, stop), daemon=True)
    service.start()
    store = MetadataStore(cfg.metadata)
    try:
        _wait("the initial copy", lambda: store.get_table("shop", "htap_demo", "orders").readable)
        print("[demo] initial copy done; the service is streaming changes")
        spark = spark_session("shop", config)
        spark.sparkContext.setLogLevel("ERROR")
        query = (
            "SELECT region, count(*) AS orders, sum(amount) AS revenue FROM shop.htap_demo.orders"
            " WHERE amount > 100 GROUP BY region ORDER BY region"
        )
        print(f"[demo] spark.sql: {query}")
        print("[demo] plan (the filter and partial aggregate run inside the Python Arrow reader):")
        plan = spark.sql("EXPLAIN " + query).collect()[0][0]
        print("\n".join("    " + line for line in plan.splitlines() if "BatchScan" in line or "HashAggregate" in line))
        spark.sql(query).show()
        cur.execute("UPDATE htap_demo.orders SET amount = amount + 1000 WHERE region = 'apac' AND id <= 10")
        cur.execute("INSERT INTO htap_demo.orders VALUES (100001, 'emea', 5000, now())")
        cur.execute("SELECT pg_current_wal_lsn()")
        target = lsn_to_int(cur.fetchone()[0])
        started = time.monotonic()
        _wait("the change to reach the replica",
              lambda: (store.get_table("shop", "htap_demo", "orders").max_safe_seq or 0) >= target - 1)
        print(f"[demo] committed an UPDATE and an INSERT in Postgres; replica caught up in {time.monotonic() - started:.2f} s")
        spark.sql(query).show()
        spark.stop()
        htap(["--config", str(config), "status"])
    finally:
        stop.set()
        service.join(timeout=30)
        store.close()
        conn.close()
    cmd = htap_command()
    print(f"[demo] done. Config: {config}; try `{cmd} --config {config} status` or `{cmd} --config {config} spark-conf`"
          f" (Spark catalog `shop`, named after the source).")
    if cmd != "htap":
        print(f"[demo] `htap` is not on your PATH: run it as {cmd}, or activate its virtualenv first"
              f" (`source {Path(cmd).parent / 'activate'}`).")
    if localpg.running(DEMO_DIR / "pg"):
        print(f"[demo] the private Postgres in {DEMO_DIR / 'pg'} keeps running; `{cmd} demo --stop` or `make clean` stops it.")
    return 0
