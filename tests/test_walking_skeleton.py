"""Issue 2: a Postgres commit becomes a row that ordinary Spark SQL returns through the catalog."""

from __future__ import annotations

import json
import random
import signal
import threading

import duckdb

from htap.rewrite.pushed import PushedPlan

from conftest import DEADLINE_S, normalized, top_aggregate, wait_until
from services import pg_dsn

TYPES_DDL = """
CREATE TABLE {t} (
  id bigint PRIMARY KEY,
  small smallint, num integer, price numeric(12,2), ratio double precision, score real,
  name text, code varchar(8), active boolean, born date, seen timestamp, at timestamptz,
  token uuid, doc jsonb, blob bytea, tags text[], scores integer[], weights numeric(6,2)[]
)"""
TYPES_ROW = (
    "INSERT INTO {t} SELECT g, (g % 100)::smallint, g * 7, g * 1.25, g / 3.0, g / 7.0, 'name ' || g,"
    " 'c' || (g % 5), g % 2 = 0, date '2020-01-01' + g, timestamp '2021-03-04 05:06:07.123456' + g * interval '1 hour',"
    " timestamptz '2021-03-04 05:06:07+02' + g * interval '1 minute', md5(g::text)::uuid,"
    " jsonb_build_object('g', g), decode(lpad(to_hex(g), 8, '0'), 'hex'),"
    " ARRAY['t' || g, NULL, 'a \"quoted\", b'], ARRAY[g, g + 1], ARRAY[g * 0.25]::numeric(6,2)[]"
    " FROM generate_series({lo}, {hi}) g"
)


def source_rows(ws, query):
    return normalized(ws.sql(query))


def test_spark_returns_exactly_the_source_rows_and_follows_changes(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.items"
    ws.sql(TYPES_DDL.format(t=t))
    ws.sql(TYPES_ROW.format(t=t, lo=1, hi=500))
    ws.sql(f"INSERT INTO {t} (id) VALUES (0)")  # a row of NULLs
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("items")

    # The source side as Spark types it: float4 widened exactly, jsonb as its text.
    query = (
        f"SELECT id, small, num, price, ratio, score::float8, name, code, active, born, seen, at, token, doc::text, blob,"
        f" tags, scores, weights FROM {t}"
    )
    spark_query = f"SELECT * FROM {catalog}.{t}"
    assert normalized(spark.sql(spark_query).collect()) == source_rows(ws, query)

    for change in (
        f"INSERT INTO {t} (id, name, price) VALUES (1000, 'new', 9.99)",
        f"UPDATE {t} SET name = 'renamed', price = price * 2, doc = NULL WHERE id % 10 = 3",
        f"DELETE FROM {t} WHERE id BETWEEN 100 AND 149",
        f"UPDATE {t} SET id = id + 10000 WHERE id = 7",  # a key change
    ):
        ws.sql(change)
        ws.wait_caught_up("items")
        assert normalized(spark.sql(spark_query).collect()) == source_rows(ws, query), change


def test_pushed_filters_columns_and_aggregates_reach_the_reader(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region text, amount numeric(10,2), note text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'r' || (g % 4), g * 0.5, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' END FROM generate_series(1, 2000) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("orders")

    agg = (
        f"SELECT region, count(*) AS n, sum(amount) AS s, min(id) AS lo, max(amount) AS hi, count(note) AS notes"
        f" FROM {catalog}.{t} WHERE id > 100 AND region IN ('r1', 'r2') GROUP BY region"
    )
    plan = spark.sql("EXPLAIN " + agg).collect()[0][0]
    scan = next(line for line in plan.splitlines() if "BatchScan" in line)
    assert "HtapScan" in scan and "agg0" in scan, plan  # the scan returns the aggregates
    # In one task (local mode), so they are final: Spark merges nothing (split: test_spark_one_task_scans).
    assert "aggregate complete in the scan" in scan and "partial_sum" not in plan, plan

    got = normalized(spark.sql(agg).collect())
    want = source_rows(
        ws,
        f"SELECT region, count(*), sum(amount), min(id), max(amount), count(note) FROM {t}"
        f" WHERE id > 100 AND region IN ('r1', 'r2') GROUP BY region",
    )
    assert got == want

    store = ws.store()
    pushed = PushedPlan.from_dict(store.recent_scans(ws.table("orders").id, 1)[0].pushed)
    store.close()
    aggregate = top_aggregate(pushed)
    assert [g.name for g in aggregate.group_by] == ["region"]
    computed = [(e.name, [a.name for a in e.args]) for _, e in aggregate.exprs if e.form == "agg"]
    assert computed == [("count_star", []), ("sum", ["amount"]), ("min", ["id"]), ("max", ["amount"]), ("count", ["note"])]
    ops = {(f.name, f.args[0].name) for f in pushed.scans[0].filter}
    assert (">", "id") in ops and ("IN", "region") in ops

    # Without aggregation: only the required columns are read, string filters are pushed.
    rows = spark.sql(f"SELECT id FROM {catalog}.{t} WHERE note IS NULL AND region LIKE 'r1%'").collect()
    store = ws.store()
    pushed = PushedPlan.from_dict(store.recent_scans(ws.table("orders").id, 1)[0].pushed)
    store.close()
    assert pushed.root.columns() == ["id"]
    ops = {(f.name, f.args[0].name) for f in pushed.scans[0].filter}
    assert {("IS_NULL", "note"), ("STARTS_WITH", "region")} <= ops, ops
    assert normalized(rows) == source_rows(ws, f"SELECT id FROM {t} WHERE note IS NULL AND region LIKE 'r1%'")


def test_sigkill_mid_burst_loses_and_duplicates_nothing(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.accounts"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, balance bigint NOT NULL, version int NOT NULL)")
    ws.sql(f"INSERT INTO {t} SELECT g, 1000, 0 FROM generate_series(1, 200) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("accounts")

    import psycopg2


    done = threading.Event()
    committed = []

    def writer():
        rng = random.Random(7)
        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = False
        cur = conn.cursor()
        for i in range(600):
            a, b = rng.sample(range(1, 260), 2)
            cur.execute(f"UPDATE {t} SET balance = balance - 1, version = version + 1 WHERE id = %s", (a,))
            cur.execute(f"INSERT INTO {t} VALUES (%s, 1, 0) ON CONFLICT (id) DO UPDATE SET version = {t.split('.')[1]}.version + 1", (b,))
            if i % 7 == 0:
                cur.execute(f"DELETE FROM {t} WHERE id = %s", (rng.randrange(1, 260),))
            conn.commit()
            committed.append(i)
        conn.close()
        done.set()

    w = threading.Thread(target=writer)
    w.start()
    wait_until(lambda: len(committed) >= 150, None, "the write burst to get going")
    ws.stop_service(signal.SIGKILL)  # in the middle of the burst
    wait_until(lambda: len(committed) >= 300, None, "more writes while the service is down")
    ws.start_service()
    w.join(timeout=DEADLINE_S)
    assert done.is_set()
    ws.wait_caught_up("accounts")

    assert normalized(spark.sql(f"SELECT * FROM {catalog}.{t}").collect()) == source_rows(ws, f"SELECT * FROM {t}")

    # No version was written twice: (key, seq) is unique across all deltas.
    from htap.conf import load_config

    cfg = load_config(ws.config)
    store = ws.store()
    files = [str(cfg.warehouse / d.path) for d in store.deltas(ws.table("accounts").id)]
    store.close()
    ((total, distinct),) = duckdb.sql(
        f"SELECT count(*), count(DISTINCT (id, _seq)) FROM read_parquet({json.dumps(files)})"
    ).fetchall()
    assert total == distinct
    assert "checkpoint" in ws.log()


def test_status_reports_rows_deltas_and_delay(workspace):
    ws = workspace
    t = f"{ws.schema}.small"
    ws.sql(f"CREATE TABLE {t} (k text PRIMARY KEY, v int)")
    ws.sql(f"INSERT INTO {t} VALUES ('a', 1), ('b', 2)")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("small")
    ws.sql(f"DELETE FROM {t} WHERE k = 'a'")
    ws.wait_caught_up("small")
    status = json.loads(ws.htap("status", "--json").stdout)
    (row,) = [s for s in status["tables"] if s["table"] == t]
    assert row["state"] == "streaming"
    assert row["rows"] == 1
    assert row["deltas"] >= 2  # the copy and the delete
    assert row["delay_s"] is not None and "/" in row["max_safe_position"]  # a Postgres LSN
    text = ws.htap("status").stdout
    assert t in text and "streaming" in text and f"source {ws.source} (postgres): position" in text
    assert status["service"]["running"] and text.startswith("service: running (")

    # The service stopped: status says so, and the table stands still (state `stopped`).
    ws.stop_service()
    status = json.loads(ws.htap("status", "--json").stdout)
    assert not status["service"]["running"] and status["service"]["services"] == []
    text = ws.htap("status").stdout
    assert text.startswith("service: NOT running (") and "serve` runs" in text
    (line,) = [x for x in text.splitlines() if x.startswith(f"{ws.source}.{t} ")]
    assert line.split()[1] == "stopped"
