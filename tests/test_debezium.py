"""Issue 4 (Debezium): decode Debezium change events into the replica.

The events are written by hand, following Debezium's documented formats (PostgreSQL and MySQL
connectors, JSON converter with and without schemas, transaction metadata, Kafka records as
`{"topic", "key", "value"}` lines), into a JSON-lines file that the `debezium` source reads like
a topic dump (test_debezium_kafka.py sends the same events through a real broker). `htap serve` then applies them and Spark (or the
replica reader) must return exactly the rows the events describe.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import signal
import subprocess
from decimal import Decimal

import duckdb
import pytest

from conftest import HTAP, normalized
from debezium_events import PLACEHOLDER, PgEvents, customer, dec_b64, order
from workspace import DebeziumWorkspace, live_delta_files


@pytest.fixture
def dbz(tmp_path):
    events = tmp_path / "events.jsonl"
    events.touch()
    ws = DebeziumWorkspace(tmp_path, events)
    yield ws, events
    ws.close()


def test_postgres_connector_events_with_transactions_reach_spark(dbz, spark):
    ws, path = dbz
    ev = PgEvents(path)
    # Snapshot (op=r), then streamed transactions with metadata.
    ev.snapshot({"customers": [customer(i) for i in range(1, 6)], "orders": [order(i, i, f"{i}0.50") for i in range(1, 4)]})
    ev.other()
    ev.begin(600)
    ev.insert("customers", customer(6, note=None, photo=None))
    ev.insert("orders", order(4, 6, "99.99"))
    ev.update("customers", customer(2, name="renamed", balance=Decimal("-0.01")), unchanged=("note",))
    ev.commit(hold_back="orders")  # the orders event arrives after END, from its own topic
    ev.begin(601)
    ev.change_key("customers", 3, customer(30, name="was three"))
    ev.change_key("customers", 5, customer(50, name="was five"), unchanged=("note", "photo"))  # TOAST kept
    ev.delete("orders", 1)
    ev.commit()
    ev.begin(602)
    ev.insert("orders", order(5, 30, "5.00"))
    ev.truncate("orders")
    ev.insert("orders", order(10, 30, "10.00"))
    ev.commit()
    ev.begin(603)
    ev.update("customers", customer(30, active=True, doc=None, rank=None), unchanged=("note", "photo"))
    ev.update("customers", customer(2, name="twice", balance=Decimal("1.00")), unchanged=("note",))
    ev.commit()
    ev.write()
    first_seq = ev.last_seq

    r = ws.htap("tables", "add", "public.customers", check=False)
    assert r.returncode == 0, r.stderr
    described = ws.table("customers", "public")
    assert [c.source_type for c in described.columns][:5] == [
        "int32", "string", "bytes org.apache.kafka.connect.data.Decimal(10,2)", "int32 io.debezium.time.Date",
        "int64 io.debezium.time.MicroTimestamp",
    ] and described.key == ("id",)
    ws.start_service()
    ws.wait_seq("customers", schema="public", seq=first_seq)
    # A table added while the service streams, long after its snapshot: its copy replays the events.
    r = ws.htap("tables", "add", "public.orders", check=False)
    assert r.returncode == 0, r.stderr
    ws.wait_seq("orders", schema="public", seq=first_seq)

    catalog = f"c_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{catalog}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.config", str(ws.config))
    schema = {f.name: f.dataType.simpleString() for f in spark.table(f"{catalog}.public.customers").schema.fields}
    assert schema["balance"] == "decimal(10,2)" and schema["updated"] == "timestamp_ntz" and schema["seen"] == "timestamp"
    for t in ("customers", "orders"):
        assert normalized(spark.sql(f"SELECT * FROM {catalog}.public.{t}").collect()) == ev.rows(t), t
    # The partial updates kept the unchanged TOAST value from older versions.
    (note,) = spark.sql(f"SELECT note FROM {catalog}.public.customers WHERE id = 30").collect()[0]
    assert note == customer(30)["note"]

    # SIGKILL, more events appended, restart: the replay skips what is durable, applies the rest once.
    ws.stop_service(signal.SIGKILL)
    ev.begin(604)
    ev.insert("customers", customer(7))
    ev.update("customers", customer(1, balance=Decimal("1000.00")), unchanged=("note", "photo"))
    ev.delete("customers", 4)
    ev.change_key("customers", 2, customer(20, name="was two"), unchanged=("note",))  # old key in a delta
    ev.change_key("customers", 1, customer(10, name="was one"), unchanged=("note", "photo"))  # old key buffered
    ev.commit()
    ev.write()
    ws.start_service()
    ws.wait_seq("customers", schema="public", seq=ev.last_seq)
    for t in ("customers", "orders"):
        assert normalized(spark.sql(f"SELECT * FROM {catalog}.public.{t}").collect()) == ev.rows(t), t

    # Appended while the service runs (the file is followed like a topic).
    ev.begin(605)
    ev.insert("orders", order(11, 7, "1.25"))
    ev.commit()
    ev.write()
    ws.wait_seq("orders", schema="public", seq=ev.last_seq)
    assert normalized(spark.sql(f"SELECT * FROM {catalog}.public.orders").collect()) == ev.rows("orders")

    from htap.conf import load_config
    from htap.connectors.registry import open_source

    # readAfter = now: "now" is the newest change event the input holds (a delete's tombstone
    # after it); the query right after the append waits until the replica holds it.
    cfg = load_config(ws.config)
    ev.begin(606)
    ev.insert("orders", order(12, 7, "2.50"))
    ev.delete("orders", 11)
    ev.commit()
    ev.write()
    assert open_source(cfg.source(ws.source)).committed_seq([("public", "orders")]) == ev.last_seq
    spark.conf.set("spark.htap.readAfter", "now")
    spark.conf.set("spark.htap.readAfterTimeoutSeconds", "120")  # a loaded machine is slow, never wrong
    try:
        assert normalized(spark.sql(f"SELECT * FROM {catalog}.public.orders").collect()) == ev.rows("orders")
    finally:
        spark.conf.unset("spark.htap.readAfter")
        spark.conf.unset("spark.htap.readAfterTimeoutSeconds")

    with live_delta_files(cfg, ws.table("customers", "public").id) as deltas:  # compaction runs meanwhile
        files = [str(cfg.warehouse / d.path) for d in deltas]
        ((total, distinct),) = duckdb.sql(
            f"SELECT count(*), count(DISTINCT (id, _seq)) FROM read_parquet({json.dumps(files)})"
        ).fetchall()
    assert total == distinct, "a version was applied twice"


# --- MySQL connector events: no transaction metadata, schemas only on the first event ------------

MYSQL_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "8"}, "field": "price"},
    {"type": "int16", "optional": True, "field": "flag"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "added"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "touched"},
]
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def my_event(op, before, after, pos, row=0, gtid=None, snapshot="false", with_schema=False, table="products"):
    source = {
        "version": "2.7.3.Final", "connector": "mysql", "name": "inv", "ts_ms": 1_700_000_000_000 + pos,
        "snapshot": snapshot, "db": "inventory", "sequence": None, "table": table, "server_id": 223344,
        "gtid": gtid, "file": "mysql-bin.000003", "pos": pos, "row": row, "thread": 7, "query": None,
    }
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_700_000_000_100 + pos, "transaction": None}
    if not with_schema:
        return payload
    rowschema = lambda which: {"type": "struct", "fields": MYSQL_FIELDS, "optional": True,  # noqa: E731
                               "name": "inv.inventory.products.Value", "field": which}
    return {"schema": {"type": "struct", "fields": [rowschema("before"), rowschema("after"),
                                                    {"type": "string", "optional": False, "field": "op"}],
                       "optional": False, "name": "inv.inventory.products.Envelope"}, "payload": payload}


def product(i, price, flag=1, name=None):
    return {"id": i, "name": name or f"product {i}", "price": dec_b64(Decimal(price), 2), "flag": flag,
            "added": 1_700_000_000_000 + i * 1000, "touched": f"2024-03-0{i % 9 + 1}T10:00:0{i % 10}Z"}


def kcat(topic, key, value) -> str:
    """A record as `kcat -J` prints it: key and value as JSON strings."""
    return json.dumps({"topic": topic, "partition": 0, "offset": 0, "tstype": "create", "ts": 0,
                       "key": None if key is None else json.dumps(key), "payload": None if value is None else json.dumps(value)})


def test_mysql_connector_events_without_metadata_through_the_replica_reader(dbz):
    ws, path = dbz
    topic = "inv.inventory.products"
    lines = []
    for i in range(1, 5):  # snapshot at one binlog position; only the first event carries its schema
        snap = "first" if i == 1 else ("last" if i == 4 else "true")
        lines.append(kcat(topic, {"id": i}, my_event("r", None, product(i, f"{i}.10"), 154, snapshot=snap, with_schema=i == 1)))
    # gtid 1: an insert and an update in one transaction (two rows events)
    lines.append(kcat(topic, {"id": 5}, my_event("c", None, product(5, "5.55"), 400, gtid=f"{GTID}:1")))
    lines.append(kcat(topic, {"id": 1}, my_event("u", product(1, "1.10"), product(1, "1.99", name="cheaper"), 450, gtid=f"{GTID}:1")))
    # gtid 2: a primary key change: delete, tombstone, create
    lines.append(kcat(topic, {"id": 2}, my_event("d", product(2, "2.10"), None, 600, gtid=f"{GTID}:2")))
    lines.append(kcat(topic, {"id": 2}, None))
    lines.append(kcat(topic, {"id": 20}, my_event("c", None, product(20, "2.10", name="product 2"), 600, row=1, gtid=f"{GTID}:2")))
    # a schema change of another table on the schema change topic: nothing for this replica
    lines.append(kcat("inv", {"databaseName": "inventory"}, {
        "source": {"connector": "mysql", "db": "inventory", "table": "audit", "file": "mysql-bin.000003", "pos": 700},
        "ts_ms": 1, "databaseName": "inventory", "schemaName": None, "ddl": "ALTER TABLE audit ADD COLUMN x int",
        "tableChanges": [{"type": "ALTER", "id": '"inventory"."audit"', "table": {
            "defaultCharsetName": "utf8mb4", "primaryKeyColumnNames": ["id"],
            "columns": [{"name": "id", "jdbcType": 4, "typeName": "INT", "typeExpression": "INT", "position": 1, "optional": False},
                        {"name": "x", "jdbcType": 4, "typeName": "INT", "typeExpression": "INT", "position": 2, "optional": True}]}}],
    }))
    # gtid 3: a delete; then the next binlog file, gtid 4: an update
    lines.append(kcat(topic, {"id": 3}, my_event("d", product(3, "3.10"), None, 800, gtid=f"{GTID}:3")))
    nxt = my_event("u", product(4, "4.10"), product(4, "4.20", flag=0), 250, gtid=f"{GTID}:4")
    nxt["source"]["file"] = "mysql-bin.000004"
    lines.append(kcat(topic, {"id": 4}, nxt))
    path.write_text("\n".join(lines) + "\n")
    last_seq = (4 << 32) | 250

    r = ws.htap("tables", "add", "inventory.products", check=False)
    assert r.returncode == 0, r.stderr
    ws.start_service()
    ws.wait_seq("products", schema="inventory", seq=last_seq)

    import pyarrow as pa

    from htap.conf import load_config
    from htap.pushdown.replica_reader import read_replica
    from htap.replica.metadata import MetadataStore
    from htap.replica.read_plans import pin_and_plan
    from htap.rewrite.pushed import table_plan

    cfg = load_config(ws.config)
    store = MetadataStore(cfg.metadata)
    table = store.get_table(ws.source, "inventory", "products")
    batches = []
    for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
        batches += read_replica(
            cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), list(plan.delta_paths),
            plan.seq, table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema, floor=plan.floor, partial=plan.partial,
        )
    store.close()
    got = pa.Table.from_batches(batches, schema=table.arrow_schema).sort_by("id").to_pylist()
    utc = dt.timezone.utc
    want = [
        (1, "cheaper", Decimal("1.99"), 1),
        (4, "product 4", Decimal("4.20"), 0),
        (5, "product 5", Decimal("5.55"), 1),
        (20, "product 2", Decimal("2.10"), 1),
    ]
    assert [(r["id"], r["name"], r["price"], r["flag"]) for r in got] == want
    assert got[0]["added"] == dt.datetime(2023, 11, 14, 22, 13, 21)  # epoch millis 1_700_000_001_000
    assert got[0]["touched"] == dt.datetime(2024, 3, 2, 10, 0, 1, tzinfo=utc)


# --- decoding, unit by unit (the Assembler on records) -------------------------------------------


def _table_info(schema, name, columns, key):
    import pyarrow as pa

    from htap.connectors.debezium.connect_types import arrow_type
    from htap.replica.models import Column, TableInfo, encode_schema

    cols = tuple(Column(n, t, True) for n, t in columns)
    kw = dict(id=1, source="s", schema=schema, name=name, columns=cols, key=tuple(key),
              arrow_schema_b64=encode_schema(pa.schema([pa.field(n, arrow_type(t)) for n, t in columns])),
              state="streaming", copy_seq=-1, max_safe_seq=None, max_safe_time=None, error=None)
    for f in TableInfo.__dataclass_fields__:
        kw.setdefault(f, None)
    return TableInfo(**kw)


def _pg(op, before, after, lsn, txid, last_commit=None, table="t", txn=None):
    return {"before": before, "after": after, "op": op, "ts_ms": 1, "transaction": txn,
            "source": {"connector": "postgresql", "schema": "public", "table": table, "txId": txid, "lsn": lsn, "ts_ms": 5000,
                       "snapshot": "false", "sequence": json.dumps([None if last_commit is None else str(last_commit), str(lsn)])}}


def _run(records, tables, from_seq=0):
    from htap.connectors.debezium.assembler import Assembler
    from htap.connectors.debezium.envelope import Record

    a = Assembler(tables, from_seq, PLACEHOLDER)
    for topic, value in records:
        a.feed(Record(topic, None, value))
    a.flush()
    return list(a.out)


def test_assembler_transactions_placeholders_tombstones_and_resume():
    from htap.connectors.changes import UNSET, Begin, Commit, Relation, RowChange

    t = _table_info("public", "t", [("id", "int32"), ("v", "string")], ["id"])
    u = _table_info("public", "u", [("id", "int32")], ["id"])
    txn = lambda i, n: {"id": f"{i}:{100 + n}", "total_order": n, "data_collection_order": n}  # noqa: E731
    records = [
        ("x.transaction", {"status": "BEGIN", "id": "7:100", "event_count": None, "data_collections": None}),
        # events of transaction 7 arrive in a different order than total_order, one after END
        ("x.public.t", _pg("u", None, {"id": 1, "v": PLACEHOLDER}, 130, 7, 90, txn=txn(7, 2))),
        ("x.public.t", _pg("c", None, {"id": 2, "v": "b"}, 120, 7, 90, txn=txn(7, 1))),
        ("x.public.t", None),  # a tombstone
        ("x.transaction", {"status": "END", "id": "7:140", "event_count": 3,
                           "data_collections": [{"data_collection": "public.t", "event_count": 2},
                                                {"data_collection": "public.u", "event_count": 1}]}),
        ("x.public.other", _pg("c", None, {"id": 9}, 125, 7, 90, table="other", txn=txn(7, 4))),  # not followed
        ("x.public.u", _pg("c", None, {"id": 5}, 135, 7, 90, table="u", txn=txn(7, 3))),
        # no metadata: consecutive events of txId 8 form one transaction
        ("x.public.t", _pg("d", {"id": 2, "v": None}, None, 150, 8, 145)),
        ("x.public.t", _pg("c", None, {"id": 3, "v": None}, 152, 8, 145)),
        ("x.public.t", _pg("m", None, None, 153, 8, 145)),
        # a key change leaving a TOASTed value unchanged: `d` of the old key, then a `c` with the
        # placeholder, paired into one change that carries the old key
        ("x.public.t", _pg("d", {"id": 3, "v": None}, None, 160, 9, 155)),
        ("x.public.t", None),
        ("x.public.t", _pg("c", None, {"id": 33, "v": PLACEHOLDER}, 162, 9, 155)),
        ("x.public.t", _pg("c", None, {"id": 34, "v": PLACEHOLDER}, 164, 9, 155)),  # unpaired: marked
    ]
    out = _run(records, [t, u])
    assert out == [
        Begin(135, 5.0),
        RowChange("public", "t", "upsert", [2, "b"]),
        RowChange("public", "t", "upsert", [1, UNSET]),
        RowChange("public", "u", "upsert", [5]),
        Commit(135, 5.0),
        Begin(152, 5.0),
        RowChange("public", "t", "delete", [2, None]),
        RowChange("public", "t", "upsert", [3, None]),
        Commit(152, 5.0),
        Begin(164, 5.0),
        RowChange("public", "t", "upsert", [33, UNSET], [3, None]),
        RowChange("public", "t", "upsert", [34, UNSET], None, True),
        Commit(164, 5.0),
    ]
    # Resuming after the first transaction delivers exactly the second.
    assert _run(records, [t, u], from_seq=135) == out[5:]
    assert _run(records, [t, u], from_seq=164) == []

    # A new column in the events: a Relation before the rows that carry it.
    changed = _run([("x.public.t", _pg("c", None, {"id": 4, "v": "x", "w": 1}, 200, 9, 160))], [t])
    assert changed[0] == Begin(200, 5.0) and changed[1] == Relation("public", "t", ("id", "v", "w"))
    # A MySQL schema change event naming the table: a Relation with its columns.
    m = _table_info("inventory", "products", [("id", "int32")], ["id"])
    ddl = {"source": {"connector": "mysql", "file": "mysql-bin.000001", "pos": 10}, "databaseName": "inventory", "ddl": "ALTER ...",
           "tableChanges": [{"type": "ALTER", "id": '"inventory"."products"', "table": {"primaryKeyColumnNames": ["id"], "columns": [
               {"name": "sku", "position": 2}, {"name": "id", "position": 1}]}}]}
    assert _run([("inv", ddl)], [m]) == [Relation("inventory", "products", ("id", "sku"))]


def test_an_event_delivered_twice_does_not_complete_its_transaction_early():
    """Kafka delivers at least once: an event of a transaction sent again before the rest must
    not count twice towards the END marker's event counts (the transaction would be applied
    without its last event, and that event dropped when it comes)."""
    from htap.connectors.changes import Begin, Commit, RowChange

    t = _table_info("public", "t", [("id", "int32"), ("v", "string")], ["id"])
    txn = lambda n: {"id": f"7:{100 + n}", "total_order": n, "data_collection_order": n}  # noqa: E731
    first = ("x.public.t", _pg("c", None, {"id": 1, "v": "a"}, 110, 7, 90, txn=txn(1)))
    records = [
        ("x.transaction", {"status": "BEGIN", "id": "7:100", "event_count": None, "data_collections": None}),
        ("x.transaction", {"status": "END", "id": "7:140", "event_count": 2,
                           "data_collections": [{"data_collection": "public.t", "event_count": 2}]}),
        first,
        first,  # again
        ("x.public.t", _pg("c", None, {"id": 2, "v": "b"}, 120, 7, 90, txn=txn(2))),
    ]
    assert _run(records, [t]) == [
        Begin(120, 5.0), RowChange("public", "t", "upsert", [1, "a"]), RowChange("public", "t", "upsert", [2, "b"]),
        Commit(120, 5.0),
    ]


def test_out_of_order_transactions_are_an_error_not_a_silent_rewrite():
    from htap.errors import SourceError

    t = _table_info("public", "t", [("id", "int32"), ("v", "string")], ["id"])
    records = [
        ("x.public.t", _pg("c", None, {"id": 1, "v": "a"}, 500, 1)),
        ("x.public.t", _pg("c", None, {"id": 2, "v": "b"}, 300, 2)),  # an older position after a newer one
    ]
    with pytest.raises(SourceError, match="out of commit order"):
        _run(records, [t])


def test_snapshot_records_of_another_partition_after_later_transactions(dbz):
    """Kafka orders records per partition only: snapshot records of one partition may be consumed
    after its `last` record and after later transactions of other partitions. They are the
    snapshot's versions (seq 100): the initial copy keeps them only for keys no later transaction
    changed, and the stream gives them their own transaction at seq 100, which a table copied
    at or after it skips and one copied before it cannot apply in order (it is copied again)."""
    import pyarrow as pa

    from htap.conf import load_config
    from htap.connectors.changes import Begin, Commit, RowChange
    from htap.connectors.debezium.source import DebeziumSource
    from htap.ingest.applier import Recopy, TransactionApplier

    ws, events = dbz

    def snap(i, v, mark="true"):
        event = _pg("r", None, {"id": i, "v": v}, 100, 1)
        event["source"]["snapshot"] = mark
        return event

    records = [
        ("x.public.t", snap(1, "one", "first")),
        ("x.public.t", snap(2, "two", "last")),  # partition A ends the snapshot
        ("x.public.t", _pg("u", None, {"id": 3, "v": "new"}, 150, 8, 140)),  # a transaction after it
        ("x.public.t", _pg("d", {"id": 4, "v": None}, None, 152, 8, 140)),
        ("x.public.t", snap(3, "old")),  # partition B: snapshot records, consumed late
        ("x.public.t", snap(4, "four")),
        ("x.public.t", snap(5, "five")),
    ]
    t = _table_info("public", "t", [("id", "int32"), ("v", "string")], ["id"])
    out = _run(records, [t])
    assert out == [
        Begin(100, 5.0), RowChange("public", "t", "upsert", [1, "one"]), RowChange("public", "t", "upsert", [2, "two"]),
        Commit(100, 5.0),
        Begin(152, 5.0), RowChange("public", "t", "upsert", [3, "new"]), RowChange("public", "t", "delete", [4, None]),
        Commit(152, 5.0),
        Begin(100, 5.0), RowChange("public", "t", "upsert", [3, "old"]), RowChange("public", "t", "upsert", [4, "four"]),
        RowChange("public", "t", "upsert", [5, "five"]), Commit(100, 5.0),
    ]

    # The initial copy: the late records of keys 3 and 4 lose to the transaction that changed them.
    events.write_text("".join(json.dumps({"topic": topic, "key": None, "value": value}) + "\n" for topic, value in records))
    source = DebeziumSource(load_config(ws.config).sources[ws.source])
    seq, chunks = source.initial_copy(t, ws.root)
    assert seq == 152
    assert {r["id"]: r["v"] for chunk in chunks for r in chunk.to_pylist()} == {1: "one", 2: "two", 3: "new", 5: "five"}

    # The stream: skipped by a table copied at or after seq 100, a copy again for one copied before.
    def applied(copy_seq):
        from dataclasses import replace

        applier = TransactionApplier([replace(t, copy_seq=copy_seq)], lambda values, ty: pa.array(values, ty), 0)
        actions = []
        for event in out:
            action = applier.apply(event)
            if action is not None:
                actions.append(action)
                applier.drop(action.table_id)  # as the service does after a Recopy
        return actions

    assert applied(100) == []
    (action,) = applied(-1)
    assert isinstance(action, Recopy) and "seq 100 arrived after a transaction at seq 152" in action.reason


def test_connect_types_decode_to_replica_values():
    import pyarrow as pa

    from htap.connectors.changes import UNSET
    from htap.connectors.debezium.connect_types import arrow_type, decoder, type_string

    cases = [
        ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3", "connect.decimal.precision": "9"}},
         dec_b64(Decimal("-12.345"), 3), pa.decimal128(9, 3), Decimal("-12.345")),
        ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
         {"scale": 2, "value": dec_b64(Decimal("7.25"), 2)}, pa.decimal128(38, 18), Decimal("7.250000000000000000")),
        ({"type": "int32", "name": "io.debezium.time.Date"}, 19000, pa.date32(), dt.date(2022, 1, 8)),
        ({"type": "int32", "name": "io.debezium.time.Time"}, 3_723_500, pa.string(), "01:02:03.5"),
        ({"type": "int64", "name": "io.debezium.time.NanoTime"}, 45_296_000_001_000, pa.string(), "12:34:56.000001"),
        ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, 1_000_000_123_000, pa.timestamp("us"), dt.datetime(1970, 1, 1, 0, 16, 40, 123)),
        ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "2024-01-02T03:04:05.5+02:00", pa.timestamp("us", tz="UTC"),
         dt.datetime(2024, 1, 2, 1, 4, 5, 500000, tzinfo=dt.timezone.utc)),
        ({"type": "bytes"}, base64.b64encode(b"\x00\x01").decode(), pa.binary(), b"\x00\x01"),
        ({"type": "float64"}, "NaN", pa.float64(), None),
        ({"type": "int8"}, -5, pa.int16(), -5),
        ({"type": "string", "name": "io.debezium.data.Json"}, '{"a": 1}', pa.string(), '{"a": 1}'),
    ]
    for field, raw, arrow, want in cases:
        ty = type_string(field)
        assert arrow_type(ty) == arrow, ty
        got = decoder(ty, PLACEHOLDER)(raw)
        if want is None:
            assert got != got  # NaN
        else:
            assert got == want, (ty, got)
        assert pa.array([got], arrow).type == arrow
    # The placeholder, as text and as the base64 of its bytes, is an unset value.
    assert decoder("string", PLACEHOLDER)(PLACEHOLDER) is UNSET
    assert decoder("bytes", PLACEHOLDER)(base64.b64encode(PLACEHOLDER.encode()).decode()) is UNSET
    from htap.errors import TableError

    with pytest.raises(TableError, match="not supported"):
        arrow_type(type_string({"type": "array"}))


def test_bad_debezium_input_fails_with_one_actionable_line(dbz, tmp_path):
    ws, path = dbz
    path.write_text(json.dumps(_pg("c", None, {"id": 1, "v": "a"}, 10, 1)) + "\n")  # no schema, no record key
    r = ws.htap("tables", "add", "public.missing", check=False)
    assert r.returncode == 2 and "no Debezium events for public.missing" in r.stderr
    r = ws.htap("tables", "add", "public.t", check=False)
    assert r.returncode == 2 and "schemas.enable=true" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    bad = subprocess.run([*HTAP, "--config", str(tmp_path / "x.toml"), "init", "--kind", "debezium", "--dsn", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no Debezium events at" in bad.stderr
