"""Read-your-writes under a concurrent write load (issue 28's show): an application commits, then
at once plans and reads the row as a Spark query with `readAfter = now` does — with the in-memory
tail (`readTail`), and every tenth round without it (a checkpoint's wait) — while another
connection keeps committing transfers (LOAD_TPS a second). Every round must see its own write: 0 misses, on Postgres
and on MariaDB. The service checkpoints as it normally does, so reads cross checkpoints, tail
segments dropped at commit, and compaction.

Planning and reading are done the way the driver and a task do them (HtapReader: the pin, the
snapshot, the partitions and the merge of the tail), without Spark's per-query overhead, so many
rounds fit: RW_ROUNDS (environment, default 200) per source; `RW_ROUNDS=1000` for the issue's
figure. The planning latency of each mode is printed (`-s`), not asserted.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
import uuid

import psycopg2
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from htap.conf import load_config
from htap.pushdown.datasource import HtapReader, ScanOptions
from htap.replica.leases import release_queries
from htap.rewrite.pushed import table_plan, to_json

from conftest import tune
from mysql_support import my_connect
from services import pg_dsn

ROUNDS = int(os.environ.get("RW_ROUNDS", "200"))
ACCOUNTS = 100
LOAD_TPS = 200


class Transfers(threading.Thread):
    """Random transfers between accounts until stopped, at most `rate` per second: the concurrent
    write load (unthrottled, one connection commits faster than a 2-core machine decodes
    MariaDB's binlog, and the stream would only fall further behind)."""

    def __init__(self, connect, table: str, rate: float = LOAD_TPS):
        super().__init__(name="transfers", daemon=True)
        self.connect, self.table, self.rate = connect, table, rate
        self.stop, self.done, self.error = threading.Event(), 0, None

    def run(self) -> None:
        rng = random.Random(28)
        conn = self.connect()
        started = time.monotonic()
        try:
            while not self.stop.wait(max(0.0, started + self.done / self.rate - time.monotonic())):
                a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(f"UPDATE {self.table} SET balance = balance - 1 WHERE id = {a}")
                    cur.execute(f"UPDATE {self.table} SET balance = balance + 1 WHERE id = {b}")
                    cur.execute("COMMIT")
                self.done += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            conn.close()


def rounds_under_load(ws, connect, schema: str) -> None:
    ws.sql(f"CREATE TABLE {schema}.rw (id int PRIMARY KEY, v bigint NOT NULL)")
    ws.sql(f"INSERT INTO {schema}.rw VALUES (1, 0)")
    ws.sql(f"CREATE TABLE {schema}.acc (id int PRIMARY KEY, balance bigint NOT NULL)")
    ws.sql(f"INSERT INTO {schema}.acc VALUES " + ", ".join(f"({i}, 1000)" for i in range(1, ACCOUNTS + 1)))
    for t in ("rw", "acc"):
        ws.htap("tables", "add", f"{schema}.{t}")
    tune(ws, flush_interval_s=0.2)  # many checkpoints under the rounds
    ws.start_service()
    ws.wait_readable("rw")
    ws.wait_readable("acc")
    ws.wait_caught_up("rw")

    schema_type = StructType([StructField("v", LongType())])
    pushed = to_json(table_plan(f"{schema}.rw", ["v"]))
    load = Transfers(connect, f"{schema}.acc")
    load.start()
    planning: dict[str, list[float]] = {"tail": [], "durable": []}
    misses, through_tail = [], 0
    store = ws.store()
    try:
        for i in range(1, ROUNDS + 1):
            assert load.error is None, load.error
            ws.sql(f"UPDATE {schema}.rw SET v = {i} WHERE id = 1")
            mode = "durable" if i % 10 == 0 else "tail"
            owner = uuid.uuid4().hex
            options = {"config": str(ws.config), "source": ws.source, "table": f"{schema}.rw", "pushed": pushed,
                       "snapshot_token": uuid.uuid4().hex, "snapshot_tables": f"c.{schema}.rw", "lease_owner": owner,
                       "read_after": "now", "read_after_timeout_s": "120"}
            if mode == "tail":
                options["read_tail"] = "true"
            started = time.perf_counter()
            reader = HtapReader(ScanOptions.parse(options), schema_type)
            planning[mode].append(time.perf_counter() - started)
            partitions = reader.partitions()
            seen = [v for p in partitions for b in reader.read(p) for v in b.column(0).to_pylist()]
            if seen != [i]:
                misses.append((i, mode, seen, [getattr(p, "plan", None) for p in partitions]))
            through_tail += mode == "tail" and any(getattr(p, "plan", None) is not None and p.plan.tail for p in partitions)
            release_queries(store, [owner])  # as the driver does when the query ends
    finally:
        load.stop.set()
        load.join()
        store.close()
    assert load.error is None, load.error
    assert not misses, (misses[:3], ws.log()[-3000:])
    # The load ran throughout (a round did not sit alone), and the tail served most reads: a
    # round whose write a checkpoint had already made durable reads no tail rows, which is right.
    assert load.done > 0
    assert through_tail > 0
    for mode, times in planning.items():
        cuts = statistics.quantiles(times, n=100) if len(times) > 1 else times * 99
        print(f"{ws.source} readAfter=now {'+ readTail' if mode == 'tail' else '(durable)'}: {len(times)} rounds,"
              f" planning p50 {statistics.median(times):.3f} s, p99 {cuts[98]:.3f} s; {load.done} transfers beside them;"
              f" {through_tail} reads through the tail")
    assert load_config(ws.config).service.tail_address  # the default serves the tail


def test_read_your_writes_rounds_under_load_on_postgres(workspace):
    def connect():
        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = True
        return conn

    rounds_under_load(workspace, connect, workspace.schema)


@pytest.mark.mysql
def test_read_your_writes_rounds_under_load_on_mariadb(my_workspace):
    rounds_under_load(my_workspace, lambda: my_connect(None), my_workspace.schema)
