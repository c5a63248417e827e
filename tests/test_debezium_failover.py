"""Issue 14: a Debezium source that names its origin database (`source_dsn`) fails over to it:
`htap failover <table> on` returns what the replica returns, through the same Spark test as
Postgres; without `source_dsn` the error says what to configure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from htap.rewrite.pushed import PushedPlan

from conftest import normalized, top_aggregate
from debezium_events import PgEvents, order
from services import pg_dsn
from workspace import DebeziumWorkspace

AGG = "SELECT customer_id, count(*), sum(amount), min(placed), max(id) FROM {t} WHERE id > 2 GROUP BY customer_id"


@pytest.fixture
def dbz_pg(tmp_path, pg):
    events = tmp_path / "events.jsonl"
    events.touch()
    ws = DebeziumWorkspace(tmp_path, events)
    schema = f"dbz_{ws.source}"
    with pg.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {schema}")
        cur.execute(f"CREATE TABLE {schema}.orders (id bigint PRIMARY KEY, customer_id int, amount numeric(12,2),"
                    f" placed timestamp)")
    yield ws, events, schema, pg
    ws.close()
    with pg.cursor() as cur:
        cur.execute(f"DROP SCHEMA {schema} CASCADE")


def add_source_dsn(ws, dsn: str) -> None:
    text = ws.config.read_text()
    header = f"[sources.{ws.source}]\n"
    assert header in text
    ws.config.write_text(text.replace(header, header + f"source_dsn = {dsn!r}\n"))


def test_debezium_failover_reads_the_origin_database(dbz_pg, spark):
    ws, path, schema, pg = dbz_pg
    ev = PgEvents(path)
    ev.schema = schema
    ev.snapshot({"customers": [], "orders": [order(i, i % 7, f"{i}.25") for i in range(1, 40)]})
    ev.begin(700)
    ev.update("orders", order(5, 2, "-3.50"))
    ev.delete("orders", 7)
    ev.insert("orders", order(100, 4, "1000.01"))
    ev.commit()
    ev.write()
    # The origin database holds what the events describe (Debezium's connector read it from there).
    with pg.cursor() as cur:
        for row in ev.model["orders"].values():
            cur.execute(f"INSERT INTO {schema}.orders VALUES (%s, %s, %s, %s)",
                        (row["id"], row["customer_id"], row["amount"], row["placed"]))

    t = f"{schema}.orders"
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_seq("orders", schema=schema, seq=ev.last_seq)
    catalog = f"c_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{catalog}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.config", str(ws.config))
    q = AGG.format(t=f"{catalog}.{t}")
    replica = normalized(spark.sql(q).collect())

    r = ws.htap("failover", t, "on", check=False)
    assert r.returncode == 0, r.stderr
    with pytest.raises(Exception, match=rf"set sources\.{ws.source}\.source_dsn to the origin database"):
        spark.sql(q).collect()

    add_source_dsn(ws, pg_dsn())
    source = normalized(spark.sql(q).collect())
    store = ws.store()
    try:
        scan = store.recent_scans(ws.table("orders", schema).id, 1)[0]
    finally:
        store.close()
    assert scan.route == "source" and top_aggregate(PushedPlan.from_dict(scan.pushed))
    assert source == replica
    with pg.cursor() as cur:
        cur.execute(AGG.format(t=t))
        assert normalized(cur.fetchall()) == replica
    rows = normalized(spark.sql(f"SELECT * FROM {catalog}.{t} WHERE amount < 10").collect())
    assert rows and rows == normalized(
        (i, c, a, p) for i, c, a, p in ev.rows("orders") if a is not None and a < Decimal(10)
    )
