"""connectors/debezium/, the pure parts: records and envelopes, transaction ids, event
positions (commit order), Kafka Connect types and value decoding, topic names."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.conf import DebeziumConfig
from htap.connectors.changes import UNSET
from htap.connectors.debezium.connect_types import (
    UNBOUNDED_DECIMAL,
    _decimal_from_bytes,
    _format_time,
    arrow_type,
    decoder,
    type_string,
)
from htap.connectors.debezium.envelope import Record, collection, parse_line, txn_key, unwrap
from htap.connectors.debezium.positions import event_position
from htap.connectors.debezium.transport import kafka_topics
from htap.errors import SourceError, TableError

P = "__debezium_unavailable_value"


def unscaled_b64(value: Decimal, scale: int) -> str:
    """A Connect Decimal as the JSON converter writes it: big-endian two's complement, base64."""
    n = int(value.scaleb(scale))
    return base64.b64encode(n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)).decode()


# --- records and envelopes ------------------------------------------------------------------------


def test_parse_line_value_only():
    assert parse_line('{"op": "c", "after": {"id": 1}}') == Record(None, None, {"op": "c", "after": {"id": 1}})
    assert parse_line("null") == Record(None, None, None)  # a tombstone
    assert parse_line("   \n") is None


def test_parse_line_kafka_records():
    line = json.dumps({"topic": "x.public.t", "key": {"id": 1}, "value": {"op": "d"}})
    assert parse_line(line) == Record("x.public.t", {"id": 1}, {"op": "d"})
    kcat = json.dumps({"topic": "x.public.t", "key": '{"id": 2}', "payload": '{"op": "c"}'})  # kcat -J: JSON as strings
    assert parse_line(kcat) == Record("x.public.t", {"id": 2}, {"op": "c"})
    assert parse_line(json.dumps({"topic": "t", "key": "plain", "payload": None})) == Record("t", "plain", None)


def test_a_document_with_a_topic_but_no_value_is_a_value():
    doc = {"topic": "x", "payload": {"op": "c"}}  # payload is an object: a JSON-converter envelope, not kcat
    assert parse_line(json.dumps(doc)) == Record(None, None, doc)


def test_parse_line_refuses_non_json():
    with pytest.raises(SourceError, match="not a JSON Debezium event"):
        parse_line("{op: c}")


def test_unwrap():
    assert unwrap({"schema": {"type": "struct"}, "payload": {"op": "c"}}) == ({"type": "struct"}, {"op": "c"})
    assert unwrap({"op": "c"}) == (None, {"op": "c"})
    assert unwrap({"schema": 1, "payload": 2, "extra": 3}) == (None, {"schema": 1, "payload": 2, "extra": 3})
    assert unwrap(None) == (None, None)


@pytest.mark.parametrize(
    "txn_id,key",
    [("571:53712712", "571"), ("571:1", "571"), ("file=mysql-bin.000003,pos=1234", "file=mysql-bin.000003,pos=1234"),
     ("3E11FA47-71CA-11E1-9E33-C80AA9429562:23", "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"), (123, "123")],
)
def test_txn_key(txn_id, key):
    assert txn_key(txn_id) == key


def test_collection_names():
    assert collection("public.orders") == ("public", "orders")
    assert collection("inventory.products.x") == ("inventory", "products.x")
    assert collection("orders") == ("", "orders")


# --- event positions -------------------------------------------------------------------------------


def test_mysql_positions():
    assert event_position({"connector": "mysql", "file": "mysql-bin.000003", "pos": 1234}) == (3 << 32) | 1234
    assert event_position({"file": "mysql-bin.000003", "pos": 1234}) == (3 << 32) | 1234  # connector unnamed
    with pytest.raises(SourceError, match="without source.file/source.pos"):
        event_position({"connector": "mysql", "file": None, "pos": 4})


def test_postgres_positions():
    assert event_position({"connector": "postgresql", "lsn": 100}) == 100
    assert event_position({"connector": "postgresql", "lsn": 100, "sequence": '["200","100"]'}) == 200
    assert event_position({"connector": "postgresql", "lsn": 300, "sequence": '[null,"300"]'}) == 300
    assert event_position({"connector": "postgresql", "lsn": 300, "sequence": ["50", "300"]}) == 300
    assert event_position({"connector": "postgresql", "lsn": 7, "sequence": "not json"}) == 7
    assert event_position({"connector": "postgresql", "sequence": '["90","80"]'}) == 90
    with pytest.raises(SourceError, match="Debezium postgresql event without source.lsn"):
        event_position({"connector": "postgresql"})


@st.composite
def pg_transactions(draw):
    """Commit LSNs C1 < C2 < ...; each transaction's change LSNs lie anywhere below its own commit
    (transactions interleave in the WAL); its events carry the previous commit's LSN."""
    commits = sorted(draw(st.lists(st.integers(10, 2**40), min_size=2, max_size=6, unique=True)))
    txns, previous = [], None
    for c in commits:
        lsns = draw(st.lists(st.integers(1, c - 1), min_size=1, max_size=4))
        seq_text = json.dumps([None if previous is None else str(previous), None])
        txns.append([{"connector": "postgresql", "lsn": lsn, "sequence": seq_text.replace("null]", f'"{lsn}"]')} for lsn in lsns])
        previous = c
    return txns


@PROPERTY
@given(pg_transactions())
def test_postgres_transaction_seqs_increase_in_commit_order_even_when_interleaved(txns):
    seqs = [max(event_position(s) for s in events) for events in txns]
    assert all(a < b for a, b in zip(seqs, seqs[1:]))


@PROPERTY
@given(st.lists(st.tuples(st.integers(1, 999999), st.integers(4, 2**32 - 1)), min_size=2, max_size=8, unique=True))
def test_mysql_positions_order_like_file_then_position(positions):
    seqs = {p: event_position({"connector": "mysql", "file": f"mysql-bin.{p[0]:06d}", "pos": p[1]}) for p in positions}
    assert sorted(positions) == sorted(positions, key=seqs.__getitem__)


# --- types ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema,text",
    [
        ({"type": "int32"}, "int32"),
        ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "int64 io.debezium.time.MicroTimestamp"),
        ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2", "connect.decimal.precision": "12"}},
         "bytes org.apache.kafka.connect.data.Decimal(12,2)"),
        ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "-2"}},
         "bytes org.apache.kafka.connect.data.Decimal(38,-2)"),
    ],
)
def test_type_string(schema, text):
    assert type_string(schema) == text


@pytest.mark.parametrize(
    "text,arrow",
    [
        ("int8", pa.int16()), ("int16", pa.int16()), ("int32", pa.int32()), ("int64", pa.int64()),
        ("float32", pa.float32()), ("float64", pa.float64()), ("double", pa.float64()), ("boolean", pa.bool_()),
        ("string", pa.string()), ("bytes", pa.binary()), ("string io.debezium.data.Json", pa.string()),
        ("bytes org.apache.kafka.connect.data.Decimal(12,2)", pa.decimal128(12, 2)),
        ("bytes org.apache.kafka.connect.data.Decimal(40,2)", UNBOUNDED_DECIMAL),
        ("struct io.debezium.data.VariableScaleDecimal", UNBOUNDED_DECIMAL),
        ("int32 io.debezium.time.Date", pa.date32()), ("int32 org.apache.kafka.connect.data.Date", pa.date32()),
        ("int32 io.debezium.time.Time", pa.string()), ("int64 io.debezium.time.MicroTime", pa.string()),
        ("int64 io.debezium.time.NanoTime", pa.string()),
        ("int64 io.debezium.time.Timestamp", pa.timestamp("us")), ("int64 io.debezium.time.MicroTimestamp", pa.timestamp("us")),
        ("int64 io.debezium.time.NanoTimestamp", pa.timestamp("us")),
        ("string io.debezium.time.ZonedTimestamp", pa.timestamp("us", tz="UTC")),
    ],
)
def test_arrow_type(text, arrow):
    assert arrow_type(text) == arrow


@pytest.mark.parametrize("text", ["array", "map", "struct", "int32 (x", "weird type with spaces"])
def test_unsupported_connect_types(text):
    with pytest.raises(TableError):
        arrow_type(text)


DECODE_CASES = [
    ("bytes org.apache.kafka.connect.data.Decimal(12,2)", unscaled_b64(Decimal("-12.34"), 2), Decimal("-12.34")),
    ("bytes org.apache.kafka.connect.data.Decimal(12,2)", 12.5, Decimal("12.5")),  # decimal.handling.mode=double-ish
    ("bytes org.apache.kafka.connect.data.Decimal(12,0)", unscaled_b64(Decimal(0), 0), Decimal(0)),
    ("struct io.debezium.data.VariableScaleDecimal", {"scale": 3, "value": unscaled_b64(Decimal("12.345"), 3)}, Decimal("12.345000000000000000")),
    ("int32 io.debezium.time.Date", -1, dt.date(1969, 12, 31)),
    ("int32 io.debezium.time.Date", 19782, dt.date(2024, 2, 29)),
    ("int32 io.debezium.time.Time", 3_723_004, "01:02:03.004"),
    ("int64 io.debezium.time.MicroTime", 3_723_000_500, "01:02:03.0005"),
    ("int64 io.debezium.time.MicroTime", 86_400_000_000, "24:00:00"),
    ("int64 io.debezium.time.NanoTime", 3_723_000_000_999, "01:02:03"),
    ("int64 io.debezium.time.Timestamp", 1_700_000_000_123, dt.datetime(2023, 11, 14, 22, 13, 20, 123000)),
    ("int64 io.debezium.time.MicroTimestamp", -1, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
    ("int64 io.debezium.time.NanoTimestamp", 1_700_000_000_123_456_789, dt.datetime(2023, 11, 14, 22, 13, 20, 123456)),
    ("string io.debezium.time.ZonedTimestamp", "2024-01-02T03:04:05.123456Z", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)),
    ("string io.debezium.time.ZonedTimestamp", "2024-01-02T03:04:05+02:00", dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.timezone.utc)),
    ("bytes", base64.b64encode(b"\x00ab").decode(), b"\x00ab"),
    ("float64", "-Infinity", -math.inf),
    ("float32", 1.5, 1.5),
    ("int8", 5, 5),
    ("int64", 2**63 - 1, 2**63 - 1),
    ("boolean", False, False),
    ("string", "x", "x"),
    ("string io.debezium.data.Json", {"a": [1, None]}, '{"a": [1, null]}'),
]


@pytest.mark.parametrize("text,raw,value", DECODE_CASES, ids=lambda x: str(x)[:40])
def test_decoder(text, raw, value):
    got = decoder(text, P)(raw)
    assert got == value and type(got) is type(value)
    assert pa.array([got], arrow_type(text)).to_pylist() == [value]


def test_nan_decodes():
    assert math.isnan(decoder("float64", P)("NaN"))


@pytest.mark.parametrize("text", [t for t, _, _ in DECODE_CASES] + ["bytes"])
def test_null_and_the_placeholder_for_every_type(text):
    decode = decoder(text, P)
    assert decode(None) is None
    assert decode(P) is UNSET
    assert decode(base64.b64encode(P.encode()).decode()) is UNSET  # binary columns: base64 of the placeholder


def test_a_custom_placeholder():
    assert decoder("string", "??")("??") is UNSET
    assert decoder("string", "??")(P) == P


def test_format_time():
    assert _format_time(0) == "00:00:00"
    assert _format_time(45_296_000_001) == "12:34:56.000001"
    assert _format_time(45_296_500_000) == "12:34:56.5"


@PROPERTY
@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**20), max_value=10**20))
def test_decimal_bytes_round_trip(value):
    assert _decimal_from_bytes(unscaled_b64(value, 4), 4) == value
    assert _decimal_from_bytes(base64.b64decode(unscaled_b64(value, 4)), 4) == value


# --- topics -------------------------------------------------------------------------------------


def cfg(**kw) -> DebeziumConfig:
    return DebeziumConfig(name="cdc", bootstrap_servers="b:9092", **kw)


def test_kafka_topics():
    assert kafka_topics(cfg(topic_prefix="shop"), [("public", "orders"), ("public", "items")]) == [
        "shop", "shop.public.items", "shop.public.orders", "shop.transaction"
    ]
    assert kafka_topics(cfg(topics=("a", "b", "a")), [("public", "orders")]) == ["a", "b"]
    assert kafka_topics(cfg(topic_prefix="p", topics=("a",)), []) == ["a", "p", "p.transaction"]
