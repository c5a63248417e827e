"""The binlog change stream: row events of the followed tables, as the unified change model."""

from __future__ import annotations

import logging
import queue
import re
import threading
import time

from htap.conf import SourceConfig
from htap.connectors import mytypes
from htap.connectors.changes import (
    Begin,
    ChangeStream,
    Commit,
    Event,
    Progress,
    Relation,
    RowChange,
    Truncate,
)
from htap.connectors.mysql.server import binlog_files, connect, error_message, master_position, table_columns
from htap.connectors.spool import TxnSpool
from htap.connectors.tables import SourceTable
from htap.errors import SourceError
from htap.seq import binlog_parts, binlog_seq, format_binlog

log = logging.getLogger(__name__)
# mysql-replication warns on every connection that binlog_row_metadata is not FULL: we do not need it.
logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)

HEARTBEAT_S = 1.0
QUEUE_EVENTS = 20_000
PROGRESS_EVERY_S = 0.2



class _Layout:
    """The columns the stream decodes one table's rows with."""

    def __init__(self, columns: list[tuple[str, str, str | None]]):
        self.columns = columns  # (name, COLUMN_TYPE, character set)
        self.names = tuple(c[0] for c in columns)
        self.signature = tuple((n, mytypes.signature(t)) for n, t, _cs in columns)

    def binds(self, binlog_columns) -> bool:
        if len(binlog_columns) != len(self.columns):
            return False
        for (_name, typ, _cs), col in zip(self.columns, binlog_columns):
            if col.type not in mytypes.binlog_codes(typ):
                return False
            if col.type == mytypes.NEWDECIMAL:
                t = mytypes.parse_type(typ)
                if (col.precision, col.decimals) != (t.args[0] if t.args else 10, t.args[1] if len(t.args) > 1 else 0):
                    return False
        return True

    def enrich(self, binlog_columns, overrides: dict[str, str] | None = None) -> list:
        """Give the TableMap's columns what the binlog leaves out; the converters per column
        (with the replica types chosen for columns by name, `overrides`)."""
        converters = []
        overrides = overrides or {}
        for i, ((name, typ, charset), col) in enumerate(zip(self.columns, binlog_columns)):
            t = mytypes.parse_type(typ)
            col.name = name
            col.unsigned = t.unsigned
            # 'binary' is no Python codec: the driver then keeps the bytes as they are.
            col.character_set_name = "binary" if mytypes.is_binary(typ) else (charset or "utf8mb4")
            if t.base == "enum":
                col.enum_values = ["", *t.args]
            elif t.base == "set":
                col.set_values = list(t.args)
            conv = mytypes.stream_converter(typ, col.type)
            chosen = mytypes.override_converter(overrides.get(name)) if name in overrides else None
            if chosen is not None:
                conv = chosen if conv is None else (lambda v, a=conv, b=chosen: b(a(v)))
            if conv is not None or t.base == "set":
                converters.append((i, conv, t.base == "set"))
        return converters

    def relation_columns(self, previous: "_Layout") -> tuple[str, ...]:
        """The names to announce; a column that kept its name but not its type is marked."""
        if self.names != previous.names:
            return self.names
        return tuple(
            name if sig == old else f"{name} (now {typ})"
            for (name, sig), old, (_n, typ, _cs) in zip(self.signature, (s for _n, s in previous.signature), self.columns)
        )


_DDL = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(ALTER|DROP|RENAME|CREATE|TRUNCATE)\b", re.I | re.S)
_TRUNCATE = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*TRUNCATE\s+(?:TABLE\s+)?((?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)",
    re.I | re.S,
)
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([\w$]+)")


def _split_name(text: str, default_schema: str) -> tuple[str, str]:
    parts = [(a.replace("``", "`") if a else b) for a, b in _IDENT.findall(text)]
    return (parts[0], parts[1]) if len(parts) == 2 else (default_schema, parts[0])


class MySQLStream(ChangeStream):
    """The binlog from a position, translated into the unified change model by a reader thread."""

    def __init__(self, source: SourceConfig, from_seq: int, tables: list[SourceTable]):
        from pymysqlreplication import BinLogStreamReader  # noqa: F401  (fail here if missing)

        self.source = source
        self.tables = {(t.schema, t.name): t for t in tables}
        self.overrides = {key: {c.name: c.override for c in t.columns if c.override} for key, t in self.tables.items()}
        self.queue: queue.Queue = queue.Queue(QUEUE_EVENTS)
        self.stopping = threading.Event()
        conn = connect(source)
        try:
            self.start_seq = self._start_seq(conn, from_seq, tables)
            idx, pos = binlog_parts(self.start_seq)
            files = binlog_files(conn)
            if idx not in files:
                have = f"{min(files)}..{max(files)}" if files else "none"
                raise SourceError(
                    f"source {source.name}: the binlog file #{idx} holding the replica's position ({format_binlog(self.start_seq)}) "
                    f"is no longer on the server (files #{have}): it was purged; keep binlogs longer than the service "
                    f"can be down, and add the tables again to copy them afresh"
                )
            self.start_file, self.start_pos = files[idx], pos
            self.charsets = {key: {n: cs for n, _t, _nl, cs in table_columns(conn, *key)} for key in self.tables}
        finally:
            conn.close()
        self.from_seq = from_seq
        self.thread = threading.Thread(target=self._run, name=f"binlog-{source.name}", daemon=True)
        self.thread.start()

    @staticmethod
    def _start_seq(conn, from_seq: int, tables: list[SourceTable]) -> int:
        copies = [t.copy_seq for t in tables if t.copy_seq is not None and t.copy_seq >= 0]
        if copies:
            # Every table's copy holds all commits up to its copy seq: start at the oldest of them.
            return max(from_seq, min(copies))
        if from_seq > 0:
            return from_seq
        return binlog_seq(*master_position(conn))

    # --- consumer side ---

    def poll(self, timeout: float) -> Event | None:
        try:
            item = self.queue.get(timeout=max(timeout, 0.0)) if timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            if not self.thread.is_alive() and not self.stopping.is_set():
                raise SourceError(f"binlog reader of source {self.source.name} stopped unexpectedly")
            return None
        if isinstance(item, BaseException):
            if isinstance(item, SourceError):
                raise item
            raise SourceError(f"binlog stream of source {self.source.name} failed: {error_message(item)}") from item
        return item

    def confirm(self, seq: int) -> None:
        """Nothing to tell the server: the replica's durable position is where the next stream starts."""

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=3 * HEARTBEAT_S + 2)

    # --- reader thread ---

    def _put(self, item) -> None:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

        cfg = self.source
        reader = None
        try:
            reader = BinLogStreamReader(
                connection_settings={
                    "host": cfg.host,
                    "port": cfg.port,
                    "user": cfg.user,
                    "password": cfg.password,
                    "read_timeout": 30,
                    "connect_timeout": 10,
                },
                server_id=cfg.server_id,
                resume_stream=True,
                log_file=self.start_file,
                log_pos=self.start_pos,
                blocking=True,
                slave_heartbeat=HEARTBEAT_S,
                only_events=[
                    RotateEvent, QueryEvent, XidEvent, GtidEvent, MariadbGtidEvent, HeartbeatLogEvent,
                    TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
                ],
                only_schemas=sorted({s for s, _t in self.tables}) or None,
                enable_logging=False,
            )
            self.log_file = self.start_file
            self.spool = TxnSpool()
            self.in_txn = False
            self.progressed = max(self.from_seq, 0)
            self.progress_at = 0.0
            self.layouts = {key: _Layout([(c.name, c.source_type, self.charsets[key].get(c.name)) for c in t.columns]) for key, t in self.tables.items()}
            self.bound: dict[int, tuple[tuple[str, str], list] | None] = {}  # table id -> (table, converters) or None (skip)
            self.lost: set[tuple[str, str]] = set()
            self._progress(self.start_seq, force=True)
            for ev in reader:
                if self.stopping.is_set():
                    break
                if isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    self._rows(ev, WriteRowsEvent, UpdateRowsEvent)
                elif isinstance(ev, TableMapEvent):
                    self._table_map(ev)
                elif isinstance(ev, XidEvent):
                    self._commit(ev.packet.log_pos, ev.timestamp)
                elif isinstance(ev, QueryEvent):
                    self._query(ev)
                elif isinstance(ev, MariadbGtidEvent):
                    self.in_txn = not (ev.flags & 0x01)  # FL_STANDALONE: a DDL statement follows alone
                elif isinstance(ev, RotateEvent):
                    self.log_file = ev.next_binlog
                    if not self.in_txn:
                        self._progress(binlog_seq(ev.next_binlog, ev.position), force=True)
                elif isinstance(ev, HeartbeatLogEvent):
                    if not self.in_txn and ev.packet.log_pos:
                        self._progress(binlog_seq(ev.ident or self.log_file, ev.packet.log_pos), force=True)
        except BaseException as e:  # noqa: BLE001  (handed to the consumer)
            if not self.stopping.is_set():
                log.debug("binlog reader failed", exc_info=True)
                self._put(e)
        finally:
            if reader is not None:
                try:
                    reader.close()
                except Exception:  # noqa: BLE001
                    pass

    def _progress(self, seq: int, force: bool = False) -> None:
        now = time.monotonic()
        if seq > self.progressed and (force or now - self.progress_at >= PROGRESS_EVERY_S or self.queue.empty()):
            self.progressed, self.progress_at = seq, now
            self._put(Progress(seq))

    def _commit(self, end_pos: int, timestamp: int) -> None:
        seq = binlog_seq(self.log_file, end_pos)
        if len(self.spool):
            self._put(Begin(seq, float(timestamp)))
            for item in self.spool:
                self._put(item)
            self._put(Commit(seq, float(timestamp)))
            self.progressed = max(self.progressed, seq)
            self.spool = TxnSpool()
        else:
            self._progress(seq)
        self.in_txn = False

    def _query(self, ev) -> None:
        text = ev.query
        word = text.lstrip()[:9].upper()
        if word.startswith("BEGIN"):
            self.in_txn = True
            return
        if word.startswith("COMMIT") or word.startswith("ROLLBACK"):
            # A ROLLBACK in the binlog ends changes of non-transactional tables that did happen.
            self._commit(ev.packet.log_pos, ev.timestamp)
            return
        if self.in_txn and not _DDL.match(text):
            return  # a statement logged inside a transaction (SAVEPOINT, ...): nothing to replicate
        # A statement of its own (DDL): it commits at the end of its event.
        schema = ev.schema.decode() if isinstance(ev.schema, bytes) else (ev.schema or "")
        seq = binlog_seq(self.log_file, ev.packet.log_pos)
        m = _TRUNCATE.match(text)
        if m:
            name = _split_name(m.group(1), schema)
            if name in self.tables:
                self._put(Begin(seq, float(ev.timestamp)))
                self._put(Truncate((name,)))
                self._put(Commit(seq, float(ev.timestamp)))
                self.progressed = max(self.progressed, seq)
        elif _DDL.match(text):
            self._schema_statement(text)
        self.in_txn = False
        self._progress(seq)

    def _schema_statement(self, text: str) -> None:
        """A DDL statement streamed by: re-read the HTAP tables it may touch (eager detection)."""
        lowered = text.lower()
        for key in self.tables:
            if key in self.lost or key[1].lower() not in lowered:
                continue
            conn = connect(self.source)
            try:
                current = _Layout([(n, t, cs) for n, t, _nl, cs in table_columns(conn, *key)])
            finally:
                conn.close()
            if current.signature != self.layouts[key].signature:
                self._put(Relation(key[0], key[1], current.relation_columns(self.layouts[key])))
                self.layouts[key] = current
                self.bound = {tid: b for tid, b in self.bound.items() if not b or b[0] != key}

    def _table_map(self, ev) -> None:
        key = (ev.schema, ev.table)
        if key not in self.tables:
            return
        if key in self.lost:
            self.bound[ev.table_id] = None
            return
        layout = self.layouts[key]
        if not layout.binds(ev.columns):
            conn = connect(self.source)
            try:
                current = _Layout([(n, t, cs) for n, t, _nl, cs in table_columns(conn, *key)])
            finally:
                conn.close()
            if current.binds(ev.columns):
                self.spool.append(Relation(key[0], key[1], current.relation_columns(layout)))
                self.layouts[key] = layout = current
            else:
                log.warning(
                    "%s.%s: the binlog's columns (%d) match neither the replica nor the current table; its changes "
                    "are no longer decoded", *key, len(ev.columns),
                )
                marker = (*layout.names, f"<{len(ev.columns)} columns in the binlog>")
                self.spool.append(Relation(key[0], key[1], marker))
                self.lost.add(key)
                self.bound[ev.table_id] = None
                return
        self.bound[ev.table_id] = (key, layout.enrich(ev.columns, self.overrides.get(key)))

    def _rows(self, ev, write_cls, update_cls) -> None:
        binding = self.bound.get(ev.table_id)
        if binding is None:
            return
        (schema, table), converters = binding
        self.in_txn = True

        def values(d: dict, none_sources: dict) -> list:
            vals = list(d.values())
            for i, conv, is_set in converters:
                v = vals[i]
                if v is None:
                    if is_set and none_sources.get(self.layouts[(schema, table)].names[i]) == "empty set":
                        vals[i] = ""
                elif conv is not None:
                    vals[i] = conv(v)
            return vals

        append = self.spool.append
        if isinstance(ev, write_cls):
            for row in ev.rows:
                append(RowChange(schema, table, "upsert", values(row["values"], row["none_sources"])))
        elif isinstance(ev, update_cls):
            for row in ev.rows:
                old = values(row["before_values"], row["before_none_sources"])
                append(RowChange(schema, table, "upsert", values(row["after_values"], row["after_none_sources"]), old))
        else:
            for row in ev.rows:
                append(RowChange(schema, table, "delete", values(row["values"], row["none_sources"])))
