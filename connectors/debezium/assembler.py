"""Transaction assembly: Debezium records in, the unified change model's events out."""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from htap.connectors.changes import (
    UNSET,
    Begin,
    Commit,
    Relation,
    RowChange,
    Truncate,
)
from htap.connectors.debezium.connect_types import decoder, type_string
from htap.connectors.debezium.envelope import Record, collection, source_table, txn_key, unwrap
from htap.connectors.debezium.positions import commit_time, event_position
from htap.connectors.spool import TxnSpool
from htap.connectors.tables import SourceTable
from htap.errors import SourceError, TableError

log = logging.getLogger(__name__)
SNAPSHOT_VALUES = ("true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental")


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
    events: list = field(default_factory=list)  # (total_order, position, payload, record schema, record key)
    orders: set = field(default_factory=set)  # the total_order of each event there
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
        initial snapshot that has not sent its `last` record yet (it goes on when Debezium does;
        records of another partition that follow its `last` record are closed)."""
        if (self.group is not None and self.group_key[0] == "snapshot" and self.snapshot_initial
                and self.group_key[1] != self.snapshot_seq):
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
            key = collection(dc.get("data_collection", ""))
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
        key = source_table(source)
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
            txn.refs.append(record.ref)
            if order in txn.orders:
                return  # sent again (Kafka delivers at least once): counted, it would end the wait early
            txn.orders.add(order)
            txn.events.append((order, position, payload, schema, record.key))
            txn.counts[key] = txn.counts.get(key, 0) + 1
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
                # belong to the same snapshot and are applied at its seq, in a transaction of
                # their own at that seq when later transactions were emitted meanwhile (the
                # applier then copies the tables they touch again, see TransactionApplier._late).
                if self.snapshot_open and (position != self.snapshot_seq or self.last_seq > position):
                    if position != self.snapshot_seq:
                        self._check_order(position)
                    self.out.append(Begin(position, commit_time(payload)))
        self.group_seq = max(self.group_seq, position)
        self.group_time = commit_time(payload)
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
                self.out.append(Begin(seq, commit_time(payload)))
                begun = True
            self._rows(source_table(payload["source"]), payload, schema, key)
        if begun:
            self.out.append(Commit(seq, commit_time(payload)))
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
            old = self._values(table, before, partial_ok=True) if (op == "u" and before is not None) else None
            values = self._values(table, after)
            inserted = False
            if op == "c" and UNSET in values:
                # An insert has every value: a `c` without some is the second half of a key
                # change (Debezium sends the old key's `d`, then the new key's `c` with the
                # unchanged TOAST values as placeholders). They are the old key's: pair the two.
                last = self.out[-1] if self.out else None
                if isinstance(last, RowChange) and last.op == "delete" and (last.schema, last.table) == key:
                    self.out.pop()
                    old = last.values
                else:
                    inserted = True  # unpaired: the applier fails the table rather than guess
            self.out.append(RowChange(key[0], key[1], "upsert", values, old, inserted))
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
