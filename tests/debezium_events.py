"""Debezium PostgreSQL-connector events written by hand, following Debezium's documented formats,
with a model of the rows they should leave behind. Shared by the file-transport tests
(test_debezium.py) and the Kafka tests (test_debezium_kafka.py)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

from conftest import normalized

PLACEHOLDER = "__debezium_unavailable_value"
EPOCH = dt.datetime(1970, 1, 1)


def dec_b64(value: Decimal, scale: int) -> str:
    """A Connect Decimal as the JSON converter writes it: base64 of the big-endian two's complement unscaled value."""
    unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def micros(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(microseconds=1)


# --- a Postgres-connector event writer with an expected-state model ------------------------------

CUSTOMER_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "balance"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "born"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "updated"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "seen"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1, "field": "opens"},
    {"type": "string", "optional": True, "field": "note"},
    {"type": "boolean", "optional": True, "field": "active"},
    {"type": "bytes", "optional": True, "field": "photo"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1, "field": "doc"},
    {"type": "int16", "optional": True, "field": "rank"},
    {"type": "float64", "optional": True, "field": "score"},
]
ORDER_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "int32", "optional": True, "field": "customer_id"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "field": "amount"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "placed"},
]
PG_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,last,false,incremental"}, "default": "false", "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
TXN_BLOCK = {"type": "struct", "fields": [
    {"type": "string", "optional": False, "field": "id"},
    {"type": "int64", "optional": False, "field": "total_order"},
    {"type": "int64", "optional": False, "field": "data_collection_order"},
], "optional": True, "name": "event.block", "version": 1, "field": "transaction"}


def envelope_schema(prefix: str, schema: str, table: str, fields: list[dict]) -> dict:
    row = lambda which: {"type": "struct", "fields": fields, "optional": True,  # noqa: E731
                         "name": f"{prefix}.{schema}.{table}.Value", "field": which}
    return {
        "type": "struct",
        "fields": [
            row("before"), row("after"),
            {"type": "struct", "fields": PG_SOURCE_FIELDS, "optional": False,
             "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            TXN_BLOCK,
        ],
        "optional": False,
        "name": f"{prefix}.{schema}.{table}.Envelope",
        "version": 1,
    }


class PgEvents:
    """Writes Debezium PostgreSQL-connector records and keeps the rows they should leave behind."""

    prefix = "shop"
    schema = "public"  # the Postgres schema the events' tables live in

    def __init__(self, path):
        self.path = path
        self.lines: list[str] = []
        self.model: dict[str, dict] = {"customers": {}, "orders": {}}
        self.fields = {"customers": CUSTOMER_FIELDS, "orders": ORDER_FIELDS}
        self.lsn = 1000
        self.last_commit: int | None = None
        self.txn = None  # [txid, id string, {table: events}, total events]
        self.pending: list = []
        self.ts = 1_700_000_000_000
        self.last_seq = 0

    # encoding of model values (what Spark returns) as the JSON converter writes them
    @staticmethod
    def encode(table: str, row: dict) -> dict:
        out = dict(row)
        if table == "customers":
            conv = {
                "balance": lambda v: dec_b64(v, 2),
                "born": lambda v: (v - dt.date(1970, 1, 1)).days,
                "updated": micros,
                "seen": lambda v: v.replace(tzinfo=dt.timezone.utc).isoformat().replace("+00:00", "Z"),
                "opens": lambda v: int(dt.timedelta(hours=int(v[:2]), minutes=int(v[3:5]), seconds=float(v[6:])) / dt.timedelta(microseconds=1)),
                "photo": lambda v: base64.b64encode(v).decode(),
            }
        else:
            conv = {"amount": lambda v: dec_b64(v, 2), "placed": lambda v: micros(v) // 1000}
        for k, f in conv.items():
            if out.get(k) is not None and out[k] not in (PLACEHOLDER, base64.b64encode(PLACEHOLDER.encode()).decode()):
                out[k] = f(out[k])
        return out

    def full(self, table: str, **values) -> dict:
        return {f["field"]: values.get(f["field"]) for f in self.fields[table]}

    def _source(self, table: str, lsn: int, txid: int, snapshot: str = "false") -> dict:
        self.ts += 7
        return {
            "version": "2.7.3.Final", "connector": "postgresql", "name": self.prefix, "ts_ms": self.ts,
            "snapshot": snapshot, "db": "shop",
            "sequence": json.dumps([None if self.last_commit is None else str(self.last_commit), str(lsn)]),
            "schema": self.schema, "table": table, "txId": txid, "lsn": lsn, "xmin": None,
        }

    def _record(self, topic: str, key, value) -> None:
        self.lines.append(json.dumps({"topic": topic, "partition": 0, "offset": len(self.lines), "key": key, "value": value}))

    def _key(self, table: str, key_value) -> dict:
        return {"schema": {"type": "struct", "fields": [self.fields[table][0]], "optional": False,
                           "name": f"{self.prefix}.{self.schema}.{table}.Key"},
                "payload": {"id": key_value}}

    def _event(self, table: str, op: str, before, after, snapshot="false", with_schema=True) -> None:
        self.lsn += 10
        txid = self.txn[0] if self.txn else 777
        payload = {
            "before": None if before is None else self.encode(table, before),
            "after": None if after is None else self.encode(table, after),
            "source": self._source(table, self.lsn if snapshot == "false" else 1000, txid, snapshot),
            "op": op, "ts_ms": self.ts + 3, "transaction": None,
        }
        if self.txn is not None:
            self.txn[2].setdefault(table, 0)
            self.txn[2][table] += 1
            self.txn[3] += 1
            payload["transaction"] = {"id": f"{txid}:{self.lsn}", "total_order": self.txn[3],
                                      "data_collection_order": self.txn[2][table]}
        value = {"schema": envelope_schema(self.prefix, self.schema, table, self.fields[table]), "payload": payload} if with_schema else payload
        row = after if after is not None else before
        key = self._key(table, row["id"]) if row is not None else None
        self.pending.append((f"{self.prefix}.{self.schema}.{table}", key, value))
        source = payload["source"]
        self.last_seq = max(self.last_seq, source["lsn"], int(json.loads(source["sequence"])[0] or 0))

    # operations (each also applied to the model)
    def snapshot(self, rows: dict[str, list[dict]]) -> None:
        self.pending = []
        names = [(t, r) for t, rs in rows.items() for r in rs]
        for i, (table, row) in enumerate(names):
            mark = "first" if i == 0 else ("last" if i == len(names) - 1 else "true")
            self._event(table, "r", None, row, snapshot=mark)
            self.model[table][row["id"]] = row
        self.flush_pending()

    def begin(self, txid: int) -> None:
        self.pending = []
        self.txn = [txid, f"{txid}:{self.lsn + 1}", {}, 0]
        self._record(f"{self.prefix}.transaction", {"id": self.txn[1]},
                     {"status": "BEGIN", "id": self.txn[1], "ts_ms": self.ts, "event_count": None, "data_collections": None})

    def insert(self, table: str, row: dict) -> None:
        self._event(table, "c", None, row)
        self.model[table][row["id"]] = row

    def update(self, table: str, row: dict, unchanged: tuple[str, ...] = ()) -> None:
        """An update; `unchanged` columns are sent as the unavailable-value placeholder (unchanged TOAST)."""
        # Debezium sends the placeholder as text, and for binary columns as the base64 of its bytes.
        b64 = base64.b64encode(PLACEHOLDER.encode()).decode()
        sent = {k: ((b64 if k == "photo" else PLACEHOLDER) if k in unchanged else v) for k, v in row.items()}
        self._event(table, "u", None, sent)  # REPLICA IDENTITY DEFAULT: no before image
        kept = self.model[table][row["id"]]
        self.model[table][row["id"]] = {k: (kept[k] if k in unchanged else v) for k, v in row.items()}

    def delete(self, table: str, key_value) -> None:
        before = self.full(table, id=key_value)  # DEFAULT identity: only the key is known
        self._event(table, "d", before, None)
        self.pending.append((f"{self.prefix}.{self.schema}.{table}", self._key(table, key_value), None))  # the tombstone
        del self.model[table][key_value]

    def change_key(self, table: str, old_key, row: dict, unchanged: tuple[str, ...] = ()) -> None:
        """Debezium's form of a primary key update: a delete, a tombstone, then a create; the
        `unchanged` columns (unchanged TOAST) as placeholders: their values are the old key's."""
        kept = self.model[table][old_key]
        self.delete(table, old_key)
        b64 = base64.b64encode(PLACEHOLDER.encode()).decode()
        self._event(table, "c", None, {k: ((b64 if k == "photo" else PLACEHOLDER) if k in unchanged else v) for k, v in row.items()})
        self.model[table][row["id"]] = {k: (kept[k] if k in unchanged else v) for k, v in row.items()}

    def truncate(self, table: str) -> None:
        self._event(table, "t", None, None)
        self.model[table].clear()

    def commit(self, hold_back: str | None = None) -> None:
        """END marker; events of `hold_back`'s topic are written after it (another topic, consumed later)."""
        later = [p for p in self.pending if hold_back and p[0].endswith("." + hold_back)]
        for p in self.pending:
            if p not in later:
                self._record(*p)
        self._record(f"{self.prefix}.transaction", {"id": self.txn[1]}, {
            "status": "END", "id": f"{self.txn[0]}:{self.lsn + 5}", "ts_ms": self.ts, "event_count": self.txn[3],
            "data_collections": [{"data_collection": f"{self.schema}.{t}", "event_count": n} for t, n in self.txn[2].items()],
        })
        for p in later:
            self._record(*p)
        self.lsn += 20
        self.last_commit = self.lsn
        self.txn = None
        self.pending = []

    def flush_pending(self) -> None:
        for p in self.pending:
            self._record(*p)
        self.pending = []

    def other(self) -> None:
        """Records a replica must skip: a heartbeat and a logical decoding message."""
        self._record(f"__debezium-heartbeat.{self.prefix}", {"serverName": self.prefix}, {"ts_ms": self.ts})
        self.lsn += 1
        self._record(f"{self.prefix}.message", None, {
            "op": "m", "ts_ms": self.ts,
            "source": {"version": "2.7.3.Final", "connector": "postgresql", "name": self.prefix, "ts_ms": self.ts,
                       "snapshot": "false", "db": "shop", "schema": "", "table": "", "txId": None, "lsn": self.lsn},
            "message": {"prefix": "audit", "content": base64.b64encode(b"hello").decode()},
        })

    def write(self) -> None:
        with open(self.path, "a") as f:
            for line in self.lines:
                f.write(line + "\n")
        self.lines = []

    def rows(self, table: str) -> list[tuple]:
        names = [f["field"] for f in self.fields[table]]
        return normalized([tuple(r.get(n) for n in names) for r in self.model[table].values()])


def customer(i: int, **over) -> dict:
    row = {
        "id": i, "name": f"customer {i}", "balance": Decimal(i * 125) / 100 - Decimal("3.00"),
        "born": dt.date(1980, 1, 1) + dt.timedelta(days=i * 100), "updated": dt.datetime(2024, 5, 6, 7, 8, 9, i * 1000),
        "seen": dt.datetime(2024, 1, 2, 3, 4, 5, 250000) + dt.timedelta(minutes=i), "opens": f"0{i % 10}:30:00.5",
        "note": ("long note " * 300) + str(i), "active": i % 2 == 0, "photo": bytes([i, 0, 255, i]),
        "doc": json.dumps({"tier": i % 3}), "rank": i - 3, "score": i / 8,
    }
    row.update(over)
    return row


def order(i: int, customer_id: int, amount: str) -> dict:
    return {"id": i, "customer_id": customer_id, "amount": Decimal(amount), "placed": dt.datetime(2024, 2, 3, 4, 5, 6, (i % 1000) * 1000)}
