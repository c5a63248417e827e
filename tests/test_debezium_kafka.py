"""Issue 14 (Kafka for real): the Debezium source against a Kafka-compatible broker.

Debezium-format events (the PostgreSQL connector's, with transaction metadata) are produced
with kafka-python to a real broker (Tansu, started by tests/services.py) — data topics with
several partitions, the transaction topic with one — and `htap serve` consumes them in a consumer
group, committing offsets only after durable checkpoints. Checked: every state the replica
exposes is the state after some complete transaction (a transaction spanning topics and
partitions is applied atomically); `kill -9` in the middle of the stream and a restart lose and
duplicate nothing.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import uuid
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from htap.conf import load_config
from htap.pushdown.replica_reader import read_plan
from htap.replica.metadata import MetadataStore
from htap.replica.read_plans import pin_and_plan
from htap.rewrite.pushed import table_plan

from conftest import normalized, wait_until
from debezium_events import PgEvents, customer, order
from services import SERVICES
from workspace import DebeziumWorkspace, live_delta_files

pytestmark = pytest.mark.kafka

PARTITIONS = {"customers": 3, "orders": 2}


class KafkaEvents(PgEvents):
    """PgEvents whose records go to Kafka topics (keyed, so a row's events stay in one partition)."""

    def __init__(self, prefix: str, producer):
        super().__init__(path=None)
        self.prefix = prefix
        self.producer = producer
        self.states: dict[int, dict[str, list]] = {}  # seq of each committed transaction -> rows after it
        self.positions: dict[str, int] = {}  # table -> position of its newest event

    def write(self) -> None:
        for line in self.lines:
            record = json.loads(line)
            key, value = record["key"], record["value"]
            self.producer.send(record["topic"], key=None if key is None else json.dumps(key).encode(),
                               value=None if value is None else json.dumps(value).encode())
        self.producer.flush()
        self.lines = []

    def _event(self, table: str, *args, **kwargs) -> None:
        super()._event(table, *args, **kwargs)
        self.positions[table] = self.last_seq

    def commit(self, hold_back: str | None = None) -> None:
        super().commit(hold_back)
        self.states[self.last_seq] = {t: self.rows(t) for t in PARTITIONS}

    def state_at(self, seq: int) -> dict[str, list]:
        """The rows after the newest transaction at or below `seq`."""
        return self.states[max(s for s in list(self.states) if s <= seq)]  # list(): another thread adds states


def random_transaction(ev: KafkaEvents, rng: random.Random, txid: int) -> None:
    """A transaction over both tables (so over several topics and partitions)."""
    ev.begin(txid)
    for _ in range(rng.randint(1, 6)):
        table = rng.choice(list(PARTITIONS))
        live = sorted(ev.model[table])
        r = rng.random()
        if r < 0.45 or not live:
            new = max([*ev.model[table], 0]) + 1
            ev.insert(table, customer(new) if table == "customers" else order(new, rng.randint(1, 50), f"{rng.randint(1, 999)}.25"))
        elif r < 0.85:
            k = rng.choice(live)
            if table == "customers":
                ev.update(table, customer(k, balance=Decimal(rng.randint(-999, 999)) / 100, name=f"v{txid}"),
                          unchanged=("note",) if rng.random() < 0.5 else ())
            else:
                ev.update(table, order(k, rng.randint(1, 50), f"{rng.randint(1, 999)}.50"))
        else:
            ev.delete(table, rng.choice(live))
    ev.commit(hold_back=rng.choice([None, "orders", "customers"]))


def replica_rows(cfg, table, seq: int) -> list[tuple]:
    """The replica's rows of `table` at `seq`, read directly (no Spark)."""
    with MetadataStore(cfg.metadata) as store:
        batches = []
        for plan in pin_and_plan(store, table, seq, cfg.window_s, pin_ttl_s=60.0):
            batches += list(read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan,
                                      table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema))
    return normalized(tuple(r.values()) for r in pa.Table.from_batches(batches, schema=table.arrow_schema).to_pylist())


@pytest.fixture
def kafka_source(tmp_path):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    broker = SERVICES.kafka
    prefix = "shop" + uuid.uuid4().hex[:8]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics(
        [NewTopic(f"{prefix}.public.{t}", num_partitions=n, replication_factor=1) for t, n in PARTITIONS.items()]
        + [NewTopic(f"{prefix}.transaction", num_partitions=1, replication_factor=1)]
    )
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    ws = DebeziumWorkspace(tmp_path, f"kafka://{broker.bootstrap}/{prefix}")
    yield ws, KafkaEvents(prefix, producer)
    ws.close()
    producer.close()


def test_kafka_transactions_are_atomic_across_topics_and_partitions_and_survive_kill9(kafka_source):
    ws, ev = kafka_source
    rng = random.Random(14)
    ev.snapshot({"customers": [customer(i) for i in range(1, 21)], "orders": [order(i, i, f"{i}0.50") for i in range(1, 11)]})
    for txid in range(600, 610):
        random_transaction(ev, rng, txid)
    ev.write()

    # Added after their snapshot: the initial copy replays the topics up to their end offsets.
    ws.htap("tables", "add", "public.customers")
    ws.htap("tables", "add", "public.orders")
    ws.start_service()
    ws.wait_seq("customers", ev.last_seq, schema="public")
    ws.wait_seq("orders", ev.last_seq, schema="public")
    cfg = load_config(ws.config)
    # The copies replayed every transaction there was (not just up to the end offsets the
    # broker reports: Tansu answers the last batch's first offset).
    assert {t: ws.table(t, "public").copy_seq for t in PARTITIONS} == ev.positions

    # Stream more transactions while checking, at every state the replica exposes, that both
    # tables are exactly as some complete transaction left them.
    stop, produced = threading.Event(), threading.Event()

    def produce(first_txid: int, count: int) -> None:
        for txid in range(first_txid, first_txid + count):
            random_transaction(ev, rng, txid)
            ev.write()
            time.sleep(0.02)  # spread over several checkpoints (more states to check; not asserted)
        produced.set()

    seen = set()

    def check_once() -> None:
        customers = ws.table("customers", "public")
        orders = ws.table("orders", "public")
        seq = min(customers.max_safe_seq, orders.max_safe_seq)
        if seq in seen:
            time.sleep(0.02)
            return
        seen.add(seq)
        expected = ev.state_at(seq)
        for table in (customers, orders):
            got, want = replica_rows(cfg, table, seq), expected[table.name]
            if got != want:  # the rows that differ, the table's metadata and the service's log
                raise AssertionError(
                    f"{table.name} at seq {seq}: {len(got)} rows, {len(want)} expected; only on the replica {sorted(set(got) - set(want), key=str)}; "
                    f"missing there {sorted(set(want) - set(got), key=str)}; {table}\n{ws.log()[-6000:]}"
                )

    def check_states() -> None:
        while not stop.is_set():
            check_once()

    errors: list[BaseException] = []

    def guarded(fn, *args):
        def run():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                stop.set()
        return threading.Thread(target=run)

    checker = guarded(check_states)
    producer = guarded(produce, 610, 60)
    before = ev.last_seq
    checker.start()
    producer.start()
    # Kill the service once it has applied part of the new transactions, in the middle of the stream.
    wait_until(lambda: errors or (ws.table("customers", "public").max_safe_seq or 0) > before, None,
               "the service to apply some of the streamed transactions")
    ws.stop_service(signal.SIGKILL)
    producer.join()
    assert produced.is_set() or errors
    produce(670, 20)  # more while the service is down
    ws.start_service()
    ws.wait_seq("customers", ev.last_seq, schema="public")
    ws.wait_seq("orders", ev.last_seq, schema="public")
    stop.set()
    checker.join()
    assert not errors, errors[0]
    check_once()  # the final state, whatever the checker thread got to see
    assert len(seen) > 1
    print(f"{len(seen)} replica states checked against the model; {len(ev.states)} transactions")

    final = ev.state_at(ev.last_seq)
    for name in PARTITIONS:
        table = ws.table(name, "public")
        assert replica_rows(cfg, table, table.max_safe_seq) == final[name], name
        with live_delta_files(cfg, table.id) as deltas:  # compaction runs meanwhile
            files = [str(cfg.warehouse / d.path) for d in deltas]
            ((total, distinct),) = duckdb.sql(
                f"SELECT count(*), count(DISTINCT (id, _seq)) FROM read_parquet({json.dumps(files)})"
            ).fetchall()
        assert total == distinct, f"{name}: a version was applied twice"

    # readAfter = now: the position of the newest change event in the query's topics now, found
    # from their ends (here a delete's tombstone is the last record of its partition, and Tansu
    # answers an end offset below its last batch).
    from htap.connectors.registry import open_source

    ev.begin(700)
    ev.delete("customers", min(ev.model["customers"]))
    ev.commit()
    ev.write()
    source = open_source(cfg.source(ws.source))
    assert source.committed_seq([("public", "customers"), ("public", "orders")]) == ev.last_seq
    assert source.committed_seq([("public", "orders")]) == ev.positions["orders"]  # only the query's topics
    ws.wait_seq("customers", ev.last_seq, schema="public")
