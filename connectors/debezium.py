"""Debezium change events as a source: from a file or folder of events, or from Kafka topics.

Debezium (PostgreSQL or MySQL connector, JSON converter, with or without the `schema`/`payload`
wrapper) already did the CDC; this source decodes its events into the unified change model.

**Inputs.** `path`: a JSON-lines file, or a folder of them read in name order as one log (a
replay archive; lines appended to the last file are picked up). A line is either an event value
(`{"before":..., "after":..., "source":..., "op":...}`, possibly wrapped as
`{"schema":..., "payload":...}`, or `null` for a tombstone) or a Kafka record
`{"topic": ..., "key": ..., "value": ...}` (`payload` instead of `value` when it is a JSON string,
as `kcat -J` writes it), which also gives the record key. `bootstrap_servers`: a thin
kafka-python consumer of the data topics (`<topic_prefix>.<schema>.<table>`, or `topics`), the
transaction topic (`<topic_prefix>.transaction`) and the schema change topic (`<topic_prefix>`);
offsets are committed only on `confirm()`, and only up to records whose transactions are durable.

**Events.** op `c`/`r` (snapshot read) upsert `after`; `u` upserts `after` with `before` as the old
row (a key change: Debezium itself sends `d` + `c`); `d` deletes `before` (or the record key);
`t` is a truncate; `m` messages, heartbeats and tombstones (`null` values) are skipped. A value
equal to `__debezium_unavailable_value` (the connector's `unavailable.value.placeholder`; base64
of it for binary columns) is `UNSET`: a partial update, filled from the row's older version.
Schema change events (`tableChanges`, MySQL's schema change topic) and events whose columns
differ from the table's become a `Relation` with the new column names.

**Transactions.** With `provide.transaction.metadata`, data events carry `transaction.id` and the
transaction topic has BEGIN/END markers: the events of one id (counted against END's per-table
`data_collections` counts, for the tables this replica follows, across topics, in `total_order`)
become one `Begin`..`Commit`, in END order. Without metadata, consecutive events of one source
transaction (`source.txId` for Postgres, `source.gtid` or else the binlog position for MySQL)
form one; snapshot reads at one position form one, streamed through as they arrive.

**Commit sequence (seq).** From the events' `source` block, so it is the same on every replay:
- MySQL: `(binlog file index << 32) | pos` (the file index is `mysql-bin.000042`'s 42), the
  highest of the transaction's events. Transactions occupy disjoint, increasing binlog ranges, so
  this orders them as they committed.
- Postgres: the highest of `source.lsn` and the last-commit LSN in `source.sequence`
  (`["<last commit lsn>", "<lsn>"]`, Debezium >= 1.6) over the transaction's events. Each
  transaction's events carry the previous commit's LSN, and every change LSN of a transaction is
  below its own commit LSN, so this increases strictly from one transaction to the next even when
  transactions interleave in the WAL. Without `sequence` (older Debezium) only change LSNs exist,
  which order transactions correctly only when they do not interleave.
A transaction whose seq is not above the previous one is an error (it would be applied under
an older version): the events are out of order or lack `source.sequence`.

**Resume.** `stream(from_seq)` reads the file again from its start (Kafka: from the committed
offsets) and drops every transaction with seq <= from_seq: nothing skipped, nothing twice.

**Initial copy.** Debezium's own snapshot (`op=r` events) is at the start of the events, so the
copy replays the events there are now (the file, or the topics from their earliest offsets) for
that one table and keeps the last version of each row, at the seq of the last complete
transaction; the stream applies what follows. So a table added later, after the stream has
passed its snapshot, is complete too. With no events yet the copy is empty at seq -1 and the
snapshot arrives through the stream. An initial snapshot still being written (no `last` record
yet) is not complete and stays out of the copy.

**Types.** A column's type is its Kafka Connect schema, kept as `<type>[ <logical name>][(p,s)]`
(e.g. `int64 io.debezium.time.MicroTimestamp`, `bytes org.apache.kafka.connect.data.Decimal(12,2)`);
`htap tables add` reads it from the first event of the table that carries a schema (so the JSON
converter needs `schemas.enable=true`), and the key from the record key (or a schema change
event's `primaryKeyColumnNames`). Later events may come without schemas.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from htap.conf import SourceConfig
from htap.connectors.changes import (
    UNSET,
    Begin,
    ChangeSource,
    ChangeStream,
    Commit,
    Event,
    Relation,
    RowChange,
    Truncate,
    decode_checked,
    python_values,
)
from htap.connectors.spool import TxnSpool
from htap.connectors.tables import Column, SourceTable
from htap.errors import NoSuchTableError, SourceError, TableError
from htap.seq import binlog_seq

log = logging.getLogger(__name__)
# kafka-python logs every failed connection attempt; what matters reaches the user as a SourceError.
logging.getLogger("kafka").setLevel(logging.CRITICAL)

SNAPSHOT_VALUES = ("true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental")
GROUP_IDLE_S = 1.0  # Kafka without transaction metadata: an open transaction ends after this much quiet
DESCRIBE_TIMEOUT_S = 15.0


# --- records ------------------------------------------------------------------------------------


@dataclass
class Record:
    """One Kafka record (or one line of a file): topic and key when known, the value, and a ref
    the transport uses to commit (None for files)."""

    topic: str | None
    key: Any
    value: Any
    ref: Any = None


def _maybe_json(v):
    if isinstance(v, (str, bytes)):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def parse_line(line: str) -> Record | None:
    """A JSON line as a Record; None for a blank line."""
    line = line.strip()
    if not line:
        return None
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise SourceError(f"not a JSON Debezium event ({e}): {line[:120]!r}") from e
    if isinstance(doc, dict) and "topic" in doc and ("value" in doc or isinstance(doc.get("payload"), (str, type(None)))):
        value = doc["value"] if "value" in doc else doc.get("payload")
        return Record(doc.get("topic"), _maybe_json(doc.get("key")), _maybe_json(value))
    return Record(None, None, doc)


def unwrap(doc) -> tuple[dict | None, Any]:
    """(schema, payload) of a JSON-converter document; schema None when it was sent without one."""
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc and len(doc) == 2:
        return doc["schema"], doc["payload"]
    return None, doc


def _source_table(source: dict) -> tuple[str, str]:
    schema = source.get("schema") or source.get("db") or ""
    if source.get("connector") == "mysql":
        schema = source.get("db") or schema
    return schema, source.get("table") or ""


_PG_TXN_ID = re.compile(r"^(\d+):\d+$")


def txn_key(txn_id) -> str:
    """The transaction id to match BEGIN, END and data events by.

    Postgres ids are `<xid>:<lsn>`, and the LSN part may differ between the markers and the
    events of one transaction: match by the xid. MySQL ids (a GTID, or binlog file:position)
    are used whole."""
    text = str(txn_id)
    m = _PG_TXN_ID.match(text)
    return m.group(1) if m else text


def _collection(name: str) -> tuple[str, str]:
    """A data collection name (schema.table or db.table) as (schema, table)."""
    schema, _, table = name.partition(".")
    return (schema, table) if table else ("", schema)


# --- seq ----------------------------------------------------------------------------------------


def event_position(source: dict) -> int:
    """The event's position in its source's commit order (see the module docstring)."""
    connector = source.get("connector")
    if connector == "mysql" or (connector is None and "pos" in source and "file" in source):
        if source.get("file") is None or source.get("pos") is None:
            raise SourceError("Debezium MySQL event without source.file/source.pos: cannot order it")
        return binlog_seq(source["file"], source["pos"])
    lsn = source.get("lsn")
    pos = int(lsn) if lsn is not None else 0
    sequence = source.get("sequence")
    if sequence:
        try:
            last_commit = json.loads(sequence)[0] if isinstance(sequence, str) else sequence[0]
        except (ValueError, IndexError, TypeError):
            last_commit = None
        if last_commit is not None:
            pos = max(pos, int(last_commit))
    if lsn is None and not sequence:
        raise SourceError(f"Debezium {connector or 'unknown'} event without source.lsn: cannot order it")
    return pos


def _commit_time(payload: dict) -> float:
    ms = (payload.get("source") or {}).get("ts_ms") or payload.get("ts_ms") or 0
    return int(ms) / 1000.0


# --- types --------------------------------------------------------------------------------------


DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
UNBOUNDED_DECIMAL = pa.decimal128(38, 18)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_TYPE = re.compile(r"^(\w+)(?: ([\w.]+))?(?:\((\d+),(-?\d+)\))?$")


def type_string(field_schema: dict) -> str:
    """A Kafka Connect field schema as the source type kept for the column."""
    t = field_schema.get("type", "")
    name = field_schema.get("name")
    text = t + (f" {name}" if name else "")
    if name == DECIMAL:
        params = field_schema.get("parameters") or {}
        precision = params.get("connect.decimal.precision")
        text += f"({int(precision) if precision is not None else 38},{int(params.get('scale', 0))})"
    return text


def _parse(source_type: str) -> tuple[str, str | None, int | None, int | None]:
    m = _TYPE.match(source_type.strip())
    if not m:
        raise TableError(f"column type {source_type!r} is not a Kafka Connect type this replica knows")
    p, s = m.group(3), m.group(4)
    return m.group(1), m.group(2), (int(p) if p else None), (int(s) if s else None)


_NAMED: dict[str, pa.DataType] = {
    "io.debezium.time.Date": pa.date32(),
    "org.apache.kafka.connect.data.Date": pa.date32(),
    "io.debezium.time.Time": pa.string(),
    "io.debezium.time.MicroTime": pa.string(),
    "io.debezium.time.NanoTime": pa.string(),
    "org.apache.kafka.connect.data.Time": pa.string(),
    "io.debezium.time.Timestamp": pa.timestamp("us"),
    "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
    "io.debezium.time.NanoTimestamp": pa.timestamp("us"),
    "org.apache.kafka.connect.data.Timestamp": pa.timestamp("us"),
    "io.debezium.time.ZonedTimestamp": pa.timestamp("us", tz="UTC"),
    VARIABLE_DECIMAL: UNBOUNDED_DECIMAL,
}
_PLAIN: dict[str, pa.DataType] = {
    "int8": pa.int16(),  # Spark's smallest integer the replica maps is SMALLINT
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def arrow_type(source_type: str) -> pa.DataType:
    """Arrow type of a column kept as a Kafka Connect type string."""
    t, name, precision, scale = _parse(source_type)
    if name == DECIMAL:
        if precision is not None and precision > 38:
            return UNBOUNDED_DECIMAL
        return pa.decimal128(precision or 38, scale or 0)
    if name in _NAMED:
        return _NAMED[name]
    if t in _PLAIN:
        return _PLAIN[t]
    raise TableError(
        f"column type {source_type!r} (Kafka Connect) is not supported yet; exclude the table or the column"
    )


def _format_time(us: int) -> str:
    seconds, fraction = divmod(int(us), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    if fraction:
        text += f".{fraction:06d}".rstrip("0")
    return text


def _decimal_from_bytes(v, scale: int) -> decimal.Decimal:
    raw = base64.b64decode(v) if isinstance(v, str) else bytes(v)
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def decoder(source_type: str, placeholder: str) -> Callable[[Any], Any]:
    """A function turning one JSON value of this column into the Python value Arrow converts
    (UNSET for the unavailable-value placeholder)."""
    t, name, _precision, scale = _parse(source_type)
    target = arrow_type(source_type)
    placeholders = {placeholder, base64.b64encode(placeholder.encode()).decode()}

    def wrap(f):
        def decode(v):
            if v is None:
                return None
            if isinstance(v, str) and v in placeholders:
                return UNSET
            return f(v)

        return decode

    if name == DECIMAL:
        s = scale or 0
        return wrap(lambda v: decimal.Decimal(str(v)) if isinstance(v, (int, float)) else _decimal_from_bytes(v, s))
    if name == VARIABLE_DECIMAL:
        q = decimal.Decimal(1).scaleb(-18)
        return wrap(lambda v: _decimal_from_bytes(v["value"], int(v["scale"])).quantize(q))
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return wrap(lambda v: _EPOCH_DATE + dt.timedelta(days=int(v)))
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return wrap(lambda v: _format_time(int(v) * 1000))
    if name == "io.debezium.time.MicroTime":
        return wrap(lambda v: _format_time(int(v)))
    if name == "io.debezium.time.NanoTime":
        return wrap(lambda v: _format_time(int(v) // 1000))
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return wrap(lambda v: _EPOCH + dt.timedelta(milliseconds=int(v)))
    if name == "io.debezium.time.MicroTimestamp":
        return wrap(lambda v: _EPOCH + dt.timedelta(microseconds=int(v)))
    if name == "io.debezium.time.NanoTimestamp":
        return wrap(lambda v: _EPOCH + dt.timedelta(microseconds=int(v) // 1000))
    if name == "io.debezium.time.ZonedTimestamp":
        return wrap(lambda v: dt.datetime.fromisoformat(v).astimezone(dt.timezone.utc))
    if pa.types.is_binary(target):
        return wrap(lambda v: base64.b64decode(v) if isinstance(v, str) else bytes(v))
    if pa.types.is_floating(target):
        return wrap(float)  # also "NaN" / "Infinity"
    if pa.types.is_integer(target):
        return wrap(int)
    if pa.types.is_boolean(target):
        return wrap(bool)
    return wrap(lambda v: v if isinstance(v, str) else json.dumps(v))


# --- transaction assembly -----------------------------------------------------------------------


@dataclass
class _Table:
    schema: str
    name: str
    columns: list[str]
    types: list[str]
    decoders: list[Callable]
    key: list[str]


@dataclass
class _Txn:
    """One source transaction being assembled."""

    id: str | None
    events: list = field(default_factory=list)  # (total_order, payload, record schema)
    counts: dict = field(default_factory=dict)  # (schema, table) -> events seen
    expected: dict | None = None  # from END: (schema, table) -> events of the followed tables
    refs: list = field(default_factory=list)


class Assembler:
    """Debezium records in, unified change events out (see the module docstring)."""

    def __init__(self, tables: list[SourceTable], from_seq: int, placeholder: str,
                 on_emit: Callable[[int, list], None] | None = None):
        self.tables: dict[tuple[str, str], _Table] = {}
        for t in tables:
            types = [c.source_type for c in t.columns]
            self.tables[(t.schema, t.name)] = _Table(
                t.schema, t.name, [c.name for c in t.columns], types, [decoder(ty, placeholder) for ty in types], list(t.key)
            )
        self.placeholder = placeholder
        self.from_seq = from_seq
        self.last_seq = from_seq
        self.on_emit = on_emit or (lambda seq, refs: None)
        self.out: deque = deque()
        self.txns: dict[str, _Txn] = {}  # metadata mode: id -> transaction
        self.ended: deque[str] = deque()  # ids in END order, waiting for their events
        self.done_ids: deque[str] = deque(maxlen=1024)
        self.group: _Txn | None = None  # no metadata: the open run of one source transaction
        self.group_key = None
        self.group_seq = -1
        self.group_time = 0.0
        self.snapshot_open = False  # a snapshot run already streamed its Begin
        self.snapshot_seq: int | None = None  # position of the last snapshot run emitted
        self.snapshot_initial = False  # ... and is Debezium's initial snapshot, complete at its `last` record
        self.loose_refs: list = []
        self.last_input = time.monotonic()

    # --- input ---

    def feed(self, record: Record) -> None:
        self.last_input = time.monotonic()
        schema, value = unwrap(record.value)
        if value is None:
            self._done(record.ref)  # a tombstone
            return
        if not isinstance(value, dict):
            raise SourceError(f"not a Debezium event: {str(value)[:120]!r}")
        if "op" in value and "source" in value:
            self._change(record, schema, value)
        elif value.get("status") in ("BEGIN", "END") and "id" in value:
            self._marker(record, value)
        elif "tableChanges" in value or "ddl" in value:
            self._schema_change(record, value)
        else:
            self._done(record.ref)  # heartbeats and anything else

    def flush(self) -> None:
        """The input has paused (end of file, quiet Kafka): close the open run, unless it is an
        initial snapshot that has not sent its `last` record yet (it goes on when Debezium does)."""
        if self.group is not None and self.group_key[0] == "snapshot" and self.snapshot_initial:
            return
        self._close_group()

    def _done(self, ref) -> None:
        if ref is not None:
            self.loose_refs.append(ref)

    def _marker(self, record: Record, value: dict) -> None:
        self._close_group()
        txn_id = txn_key(value["id"])
        if value["status"] == "BEGIN":
            if txn_id not in self.done_ids:
                txn = self.txns.setdefault(txn_id, _Txn(txn_id))
                txn.refs.append(record.ref)
            else:
                self._done(record.ref)
            return
        if txn_id in self.done_ids:
            self._done(record.ref)
            return
        txn = self.txns.setdefault(txn_id, _Txn(txn_id))
        txn.refs.append(record.ref)
        expected = {}
        for dc in value.get("data_collections") or []:
            key = _collection(dc.get("data_collection", ""))
            if key in self.tables:
                expected[key] = int(dc.get("event_count") or 0)
        txn.expected = expected
        self.ended.append(txn_id)
        self._emit_ready()

    def _schema_change(self, record: Record, value: dict) -> None:
        self._close_group()
        for change in value.get("tableChanges") or []:
            key = self._change_table(change, value)
            if key not in self.tables:
                continue
            columns = sorted((change.get("table") or {}).get("columns") or [], key=lambda c: c.get("position", 0))
            names = [c["name"] for c in columns] if change.get("type") != "DROP" else []
            self._relation(key, names)
        self._done(record.ref)

    @staticmethod
    def _change_table(change: dict, value: dict) -> tuple[str, str]:
        parts = [p.strip('"`') for p in re.findall(r'"[^"]*"|`[^`]*`|[^."`]+', change.get("id", ""))]
        if len(parts) >= 2:
            return parts[-2], parts[-1]
        return value.get("databaseName") or value.get("schemaName") or "", parts[-1] if parts else ""

    def _relation(self, key: tuple[str, str], names: list[str], schema_fields: dict | None = None) -> None:
        table = self.tables[key]
        if names == table.columns:
            return
        self.out.append(Relation(key[0], key[1], tuple(names)))
        old = dict(zip(table.columns, zip(table.types, table.decoders)))
        types, decoders = [], []
        for n in names:
            if schema_fields and n in schema_fields:
                ty = type_string(schema_fields[n])
            else:
                ty = old.get(n, ("string", None))[0]
            try:
                dec = decoder(ty, self.placeholder)
            except TableError:
                ty, dec = "string", decoder("string", self.placeholder)
            types.append(ty)
            decoders.append(dec)
        table.columns, table.types, table.decoders = list(names), types, decoders

    def _change(self, record: Record, schema: dict | None, payload: dict) -> None:
        source = payload["source"]
        key = _source_table(source)
        op = payload["op"]
        txn_info = payload.get("transaction")
        if op == "m" or key not in self.tables:
            if txn_info and txn_info.get("id") is not None and txn_key(txn_info["id"]) in self.txns:
                self.txns[txn_key(txn_info["id"])].refs.append(record.ref)
            else:
                self._done(record.ref)
            return
        position = event_position(source)
        if txn_info and txn_info.get("id") is not None:
            self._close_group()
            txn_id = txn_key(txn_info["id"])
            if txn_id in self.done_ids:
                self._done(record.ref)
                return
            txn = self.txns.setdefault(txn_id, _Txn(txn_id))
            order = int(txn_info.get("total_order") or len(txn.events) + 1)
            txn.events.append((order, position, payload, schema, record.key))
            txn.counts[key] = txn.counts.get(key, 0) + 1
            txn.refs.append(record.ref)
            self._emit_ready()
            return
        # No transaction metadata: runs of one source transaction.
        if op == "r" or str(source.get("snapshot", "false")).lower() in SNAPSHOT_VALUES:
            group_key = ("snapshot", position)
        elif source.get("connector") == "mysql":
            group_key = ("gtid", source["gtid"]) if source.get("gtid") else ("pos", source.get("file"), source.get("pos"))
        else:
            group_key = ("tx", source.get("txId"))
        if self.group is not None and group_key != self.group_key:
            self._close_group()
        if self.group is None:
            self.group, self.group_key, self.group_seq = _Txn(None), group_key, position
            self.group.events = TxnSpool()
            if group_key[0] == "snapshot":
                # A snapshot run has one position: stream it through instead of holding it.
                self.snapshot_open = position > self.from_seq
                # Snapshot records of one position may arrive after its `last` record when the
                # topics have several partitions (Kafka orders records per partition only): they
                # belong to the same snapshot and are applied at its seq.
                if self.snapshot_open and position != self.snapshot_seq:
                    self._check_order(position)
                    self.out.append(Begin(position, _commit_time(payload)))
        self.group_seq = max(self.group_seq, position)
        self.group_time = _commit_time(payload)
        self.group.refs.append(record.ref)
        if group_key[0] == "snapshot":
            mark = str(source.get("snapshot", "")).lower()
            self.snapshot_initial = mark in ("true", "first", "first_in_data_collection", "last_in_data_collection", "last")
            if self.snapshot_open:
                self._rows(key, payload, schema, record.key)
            if mark == "last":
                self._close_group()  # the snapshot's final record
        else:
            self.group.events.append((0, position, payload, schema, record.key))

    # --- output ---

    def _check_order(self, seq: int) -> None:
        if seq <= self.last_seq and seq > self.from_seq:
            raise SourceError(
                f"Debezium transaction at seq {seq} follows one at seq {self.last_seq}: the events are out of "
                f"commit order (Postgres: use Debezium >= 1.6, whose source.sequence orders them; or enable "
                f"provide.transaction.metadata)"
            )

    def _close_group(self) -> None:
        group, self.group = self.group, None
        if group is None:
            return
        seq = self.group_seq
        if self.group_key[0] == "snapshot":
            if self.snapshot_open:
                self.out.append(Commit(seq, self.group_time))
                self.last_seq = max(self.last_seq, seq)
                self.snapshot_seq = seq
            self.snapshot_open = False
            self.on_emit(max(seq, self.last_seq), group.refs)
            return
        self._emit(seq, list(group.events), group.refs)

    def _emit_ready(self) -> None:
        while self.ended:
            txn = self.txns[self.ended[0]]
            if any(txn.counts.get(k, 0) < n for k, n in txn.expected.items()):
                return  # its events have not all arrived yet
            self.ended.popleft()
            del self.txns[txn.id]
            self.done_ids.append(txn.id)
            if not txn.events:
                self.on_emit(self.last_seq, txn.refs)
                continue
            txn.events.sort(key=lambda e: e[0])
            seq = max(e[1] for e in txn.events)
            self._emit(seq, txn.events, txn.refs)

    def _emit(self, seq: int, events: Iterable, refs: list) -> None:
        if seq <= self.from_seq:
            self.on_emit(self.from_seq, refs)  # durable already (a replay)
            return
        self._check_order(seq)
        begun = False
        for _order, _pos, payload, schema, key in events:
            if not begun:
                self.out.append(Begin(seq, _commit_time(payload)))
                begun = True
            self._rows(_source_table(payload["source"]), payload, schema, key)
        if begun:
            self.out.append(Commit(seq, _commit_time(payload)))
            self.last_seq = seq
        self.on_emit(seq, refs)

    def _rows(self, key: tuple[str, str], payload: dict, schema: dict | None, record_key) -> None:
        table = self.tables[key]
        op = payload["op"]
        if op == "t":
            self.out.append(Truncate((key,)))
            return
        before, after = payload.get("before"), payload.get("after")
        row = after if op in ("c", "r", "u") else None  # a delete's before image may hold only the key
        if row is not None and list(row) != table.columns:
            fields = None
            if schema:
                for f in schema.get("fields", []):
                    if f.get("field") in ("after", "before") and f.get("fields"):
                        fields = {x["field"]: x for x in f["fields"]}
                        break
            self._relation(key, list(row), fields)
        if op in ("c", "r", "u"):
            if after is None:
                return
            old = self._values(table, before) if (op == "u" and before is not None) else None
            self.out.append(RowChange(key[0], key[1], "upsert", self._values(table, after), old))
        elif op == "d":
            if before is None:
                _kschema, kvalue = unwrap(record_key)
                if not isinstance(kvalue, dict):
                    log.warning("%s.%s: a delete without before image or record key was skipped", *key)
                    return
                before = kvalue
            self.out.append(RowChange(key[0], key[1], "delete", self._values(table, before, partial_ok=True)))

    @staticmethod
    def _values(table: _Table, row: dict, partial_ok: bool = False) -> list:
        values = []
        for name, dec in zip(table.columns, table.decoders):
            v = row.get(name)
            v = dec(v)
            if v is UNSET and partial_ok:
                v = None
            values.append(v)
        return values


# --- transports ---------------------------------------------------------------------------------


class FileTransport:
    """Records from a JSON-lines file or a folder of them (name order); follows appends."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.files: list[Path] = []
        self.index = 0
        self.offset = 0
        self.handle = None

    def _list(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir() if p.is_file() and not p.name.startswith("."))
        return [self.path] if self.path.exists() else []

    def read(self, limit: int = 5000) -> list[Record]:
        """Up to `limit` records; an empty list at the (current) end of the input."""
        out: list[Record] = []
        if not self.files or self.index >= len(self.files) - 1:
            self.files = self._list()
        while len(out) < limit and self.index < len(self.files):
            if self.handle is None:
                self.handle = open(self.files[self.index], "rb")
                self.handle.seek(self.offset)
            line = self.handle.readline()
            if line and not line.endswith(b"\n"):
                # A last line without its newline: complete if it parses, else still being written.
                try:
                    rec = parse_line(line.decode("utf-8"))
                except (SourceError, UnicodeDecodeError):
                    if self.index < len(self.files) - 1:
                        raise
                    self.handle.seek(self.offset)
                    break
                self.offset = self.handle.tell()
                if rec is not None:
                    out.append(rec)
                continue
            if not line:
                if self.index < len(self.files) - 1:
                    self.handle.close()
                    self.handle, self.index, self.offset = None, self.index + 1, 0
                    continue
                break  # the end, for now: the last file may still grow
            self.offset = self.handle.tell()
            rec = parse_line(line.decode("utf-8"))
            if rec is not None:
                out.append(rec)
        return out

    def commit(self, refs) -> None:
        pass

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def iter_file_records(path: str) -> Iterator[Record]:
    transport = FileTransport(path)
    try:
        while True:
            batch = transport.read()
            if not batch:
                return
            yield from batch
    finally:
        transport.close()


def _kafka_consumer(cfg: SourceConfig, topics: list[str], group: bool):
    try:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
    except ImportError as e:  # pragma: no cover
        raise SourceError("kafka-python is not installed: pip install kafka-python") from e
    try:
        return KafkaConsumer(
            *topics,
            bootstrap_servers=cfg.bootstrap_servers.split(","),
            group_id=cfg.group_id if group else None,
            enable_auto_commit=False,
            # Joining a group takes about half the session timeout (the coordinator waits for
            # members); Kafka clients default to 45 s, which would delay every start.
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=max(100, cfg.session_timeout_ms // 3),
            auto_offset_reset="earliest",
            key_deserializer=lambda b: _maybe_json(b) if b is not None else None,
            value_deserializer=lambda b: json.loads(b) if b is not None else None,
            request_timeout_ms=max(30_000, cfg.session_timeout_ms + 5_000),
        )
    except KafkaError as e:
        raise SourceError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {e}; check bootstrap_servers and that the brokers are up") from e


def kafka_topics(cfg: SourceConfig, tables: Iterable[tuple[str, str]]) -> list[str]:
    if cfg.topics:
        data = list(cfg.topics)
    else:
        data = [f"{cfg.topic_prefix}.{schema}.{table}" for schema, table in tables]
    extra = [f"{cfg.topic_prefix}.transaction", cfg.topic_prefix] if cfg.topic_prefix else []
    return sorted(set(data + extra))


class KafkaTransport:
    """A thin kafka-python consumer: records in partition order; offsets committed on demand."""

    def __init__(self, cfg: SourceConfig, tables: Iterable[tuple[str, str]]):
        self.consumer = _kafka_consumer(cfg, kafka_topics(cfg, tables), group=True)
        self.pending: dict = {}  # TopicPartition -> [[offset, seq or None], ...] in offset order

    def read(self, limit: int = 5000, timeout_ms: int = 200) -> list[Record]:
        polled = self.consumer.poll(timeout_ms=timeout_ms, max_records=limit)
        out = []
        for tp, records in polled.items():
            entries = self.pending.setdefault(tp, [])
            for r in records:
                entry = [r.offset, None]
                entries.append(entry)
                out.append(Record(r.topic, r.key, r.value, entry))
        return out

    def commit(self, seq: int) -> None:
        """Commit, per partition, the offsets whose records belong to transactions with seq <= `seq`."""
        from kafka.structs import OffsetAndMetadata

        def offset(n: int):
            if len(OffsetAndMetadata._fields) == 3:
                return OffsetAndMetadata(n, "", -1)
            return OffsetAndMetadata(n, "")  # kafka-python 2.0: no leader epoch

        offsets = {}
        for tp, entries in self.pending.items():
            n = 0
            while n < len(entries) and entries[n][1] is not None and entries[n][1] <= seq:
                n += 1
            if n:
                offsets[tp] = offset(entries[n - 1][0] + 1)
                del entries[:n]
        if offsets:
            self.consumer.commit(offsets)

    def close(self) -> None:
        self.consumer.close(autocommit=False)


# --- the stream and the source ------------------------------------------------------------------


class DebeziumStream(ChangeStream):
    def __init__(self, cfg: SourceConfig, from_seq: int, tables: list[SourceTable]):
        self.cfg = cfg
        self.kafka = bool(cfg.bootstrap_servers)
        keys = [(t.schema, t.name) for t in tables]
        self.transport = KafkaTransport(cfg, keys) if self.kafka else FileTransport(cfg.path)
        self.assembler = Assembler(tables, from_seq, cfg.unavailable_value_placeholder, on_emit=self._tag)
        self.quiet = False

    @staticmethod
    def _tag(seq: int, refs: list) -> None:
        for ref in refs:
            if ref is not None:
                ref[1] = seq

    def poll(self, timeout: float) -> Event | None:
        deadline = time.monotonic() + timeout
        a = self.assembler
        while True:
            if a.out:
                return a.out.popleft()
            records = self.transport.read()
            for rec in records:
                a.feed(rec)
            # Records done on their own (tombstones, markers of nothing) count as of the last emitted seq.
            if a.loose_refs:
                self._tag(a.last_seq, a.loose_refs)
                a.loose_refs = []
            if records:
                self.quiet = False
                continue
            if not self.quiet and (not self.kafka or time.monotonic() - a.last_input >= GROUP_IDLE_S):
                a.flush()  # the end of the file (for now), or a quiet topic
                self.quiet = True
                continue
            if a.out:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, 0.05 if self.kafka else 0.2))

    def confirm(self, seq: int) -> None:
        if self.kafka:
            self.transport.commit(seq)

    def close(self) -> None:
        self.transport.close()


class DebeziumSource(ChangeSource):

    def __init__(self, config: SourceConfig):
        self.config = config

    def _records(self, tables: list[tuple[str, str]]) -> Iterator[Record]:
        cfg = self.config
        if not cfg.bootstrap_servers:
            yield from iter_file_records(cfg.path)
            return
        consumer = _kafka_consumer(cfg, kafka_topics(cfg, tables), group=False)
        try:
            deadline, quiet = time.monotonic() + DESCRIBE_TIMEOUT_S, 0
            while time.monotonic() < deadline and quiet < 3:
                polled = consumer.poll(timeout_ms=1000)
                quiet = 0 if polled else quiet + 1
                for tp_records in polled.values():
                    for r in tp_records:
                        yield Record(r.topic, r.key, r.value)
        finally:
            consumer.close(autocommit=False)

    def check(self) -> None:
        cfg = self.config
        if cfg.bootstrap_servers:
            consumer = _kafka_consumer(cfg, [], group=False)
            try:
                consumer.topics()
            except Exception as e:  # noqa: BLE001
                raise SourceError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {e}") from e
            finally:
                consumer.close(autocommit=False)
            return
        path = Path(cfg.path)
        if not path.exists():
            raise SourceError(f"no Debezium events at {path}: point sources.{cfg.name}.path at a JSON-lines file or a folder of them")

    def describe_table(self, schema: str, table: str) -> tuple[list[Column], list[str]]:
        seen = False
        columns: list[Column] | None = None
        key: list[str] | None = None
        for rec in self._records([(schema, table)]):
            _s, value = unwrap(rec.value)
            if not isinstance(value, dict):
                continue
            if "tableChanges" in value:
                for change in value.get("tableChanges") or []:
                    if Assembler._change_table(change, value) == (schema, table):
                        seen = True
                        key = key or list((change.get("table") or {}).get("primaryKeyColumnNames") or []) or None
                continue
            if "op" not in value or _source_table(value.get("source") or {}) != (schema, table):
                continue
            seen = True
            if key is None and rec.key is not None:
                kschema, kvalue = unwrap(rec.key)
                if kschema and kschema.get("fields"):
                    key = [f["field"] for f in kschema["fields"]]
                elif isinstance(kvalue, dict) and kvalue:
                    key = list(kvalue)
            if columns is None and _s:
                for f in _s.get("fields", []):
                    if f.get("field") in ("after", "before") and f.get("fields"):
                        columns = [
                            Column(x["field"], type_string(x), bool(x.get("optional", True))) for x in f["fields"]
                        ]
                        break
            if columns is not None and key is not None:
                break
        where = self.config.path or f"Kafka topics of prefix {self.config.topic_prefix!r}"
        if not seen:
            raise NoSuchTableError(
                f"no Debezium events for {schema}.{table} in {where}; check the name (<schema or database>.<table> "
                f"as in the events' source block)"
            )
        if columns is None:
            raise TableError(
                f"the Debezium events for {schema}.{table} carry no schema: set value.converter.schemas.enable=true "
                f"on the connector's JSON converter (at least until the table is added)"
            )
        if not key:
            raise TableError(
                f"no primary key known for {schema}.{table}: the events carry no record key (store records as "
                f'{{"topic": ..., "key": ..., "value": ...}} lines, or read them from Kafka)'
            )
        missing = [k for k in key if k not in {c.name for c in columns}]
        if missing:
            raise TableError(f"{schema}.{table}: key columns {missing} are not among the event's columns")
        for c in columns:
            arrow_type(c.source_type)  # raises for an unsupported type, naming it
        return columns, key

    def arrow_type(self, source_type: str) -> pa.DataType:
        return arrow_type(source_type)

    def prepare(self) -> None:
        """Nothing to create: Debezium owns the slot or binlog position."""

    def _records_to_end(self, tables: list[tuple[str, str]]) -> Iterator[Record]:
        """Every record there is now: the whole file or folder, or the topics up to their end offsets."""
        cfg = self.config
        if not cfg.bootstrap_servers:
            yield from iter_file_records(cfg.path)
            return
        from kafka import TopicPartition

        consumer = _kafka_consumer(cfg, [], group=False)
        try:
            parts = [TopicPartition(t, p) for t in kafka_topics(cfg, tables) for p in sorted(consumer.partitions_for_topic(t) or ())]
            if not parts:
                return
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            end = consumer.end_offsets(parts)
            remaining = {tp for tp in parts if end.get(tp, 0) > 0}
            stalled = time.monotonic() + 60
            while remaining:
                polled = consumer.poll(timeout_ms=1000)
                for tp, records in polled.items():
                    for r in records:
                        if r.offset < end[tp]:
                            yield Record(r.topic, r.key, r.value)
                for tp in list(remaining):
                    if consumer.position(tp) >= end[tp]:
                        remaining.discard(tp)
                if polled:
                    stalled = time.monotonic() + 60
                elif time.monotonic() > stalled:
                    raise SourceError(f"Kafka at {cfg.bootstrap_servers} stopped delivering before the end of {sorted(str(t) for t in remaining)}")
        finally:
            consumer.close(autocommit=False)

    def initial_copy(self, table: SourceTable, work_dir: Path) -> tuple[int, Iterator[pa.Table]]:
        """The table as the events there are now leave it, at the seq of the last complete transaction.

        Debezium's own snapshot (`op=r`) is at the start of the events, so the copy replays them
        (the file, or the topics from their earliest offsets) for this table alone and keeps the
        final row per key; the stream then applies what comes after that seq. With no events
        yet, the copy is empty at seq -1 and the snapshot arrives through the stream.
        """
        names = [c.name for c in table.columns]
        key_positions = [names.index(k) for k in table.key]
        rows: dict[tuple, list] = {}
        copy_seq, pending = -1, []
        assembler = Assembler([table], -1, self.config.unavailable_value_placeholder)

        def apply(event) -> None:
            """Changes count once their transaction commits (a snapshot still running does not)."""
            nonlocal copy_seq, pending
            if isinstance(event, Begin):
                pending = []
            elif isinstance(event, (RowChange, Truncate)):
                pending.append(event)
            elif isinstance(event, Commit):
                for change in pending:
                    fold(change)
                pending = []
                copy_seq = event.seq
            elif isinstance(event, Relation):
                raise TableError(
                    f"{table.qualified_name} changed columns within the Debezium events (now {list(event.columns)}); "
                    f"the replica has {names}: add the table again to describe it afresh"
                )

        def fold(event) -> None:
            if isinstance(event, Truncate):
                rows.clear()
            else:
                values = event.values
                key = tuple(values[i] for i in key_positions)
                if event.op == "delete":
                    rows.pop(key, None)
                    return
                if event.old is not None:
                    old_key = tuple(event.old[i] for i in key_positions)
                    if old_key != key:
                        rows.pop(old_key, None)
                if UNSET in values:
                    prev = rows.get(key)
                    values = [(prev[i] if prev is not None else None) if v is UNSET else v for i, v in enumerate(values)]
                rows[key] = values

        for record in self._records_to_end([(table.schema, table.name)]):
            assembler.feed(record)
            while assembler.out:
                apply(assembler.out.popleft())
        assembler.flush()
        while assembler.out:
            apply(assembler.out.popleft())
        log.info("initial copy of %s from the Debezium events: %d rows at seq %s", table.qualified_name, len(rows), copy_seq)
        schema = table.arrow_schema

        def chunks() -> Iterator[pa.Table]:
            values = list(rows.values())
            for start in range(0, len(values), 100_000):
                part = values[start:start + 100_000]
                columns = list(zip(*part))
                arrays = [decode_checked(python_values, col, f.type, f.name) for col, f in zip(columns, schema)]
                yield pa.Table.from_arrays(arrays, schema=schema)

        return copy_seq, chunks()

    def stream(self, from_seq: int, tables: list[SourceTable]) -> ChangeStream:
        return DebeziumStream(self.config, from_seq, tables)

    def drop(self) -> list[str]:
        if self.config.bootstrap_servers:
            return [
                f"nothing to drop for source {self.config.name}: Debezium owns the source's slot or binlog reader; "
                f"Kafka consumer group {self.config.group_id} keeps its committed offsets (delete it with "
                f"`kafka-consumer-groups.sh --delete --group {self.config.group_id}` if nothing else uses it)"
            ]
        return [f"nothing to drop for source {self.config.name}: its events are read from {self.config.path}"]
