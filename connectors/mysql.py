"""MySQL / MariaDB as a source: checks, table description, consistent initial copy, binlog CDC.

CDC reads the binary log in ROW format with full row images through `mysql-replication`, as a
replica would (COM_BINLOG_DUMP from a file and position, with this source's `server_id`).

**Commit sequence.** `seq = (binlog file index << 32) | end position of the commit event`: the
XID event that ends an InnoDB transaction, the COMMIT query of a non-transactional one, or the
statement itself for DDL such as TRUNCATE. Binlog files are numbered in order (`mysql-bin.000042`
has index 42) and positions within a file stay below 4 GiB (`max_binlog_size` <= 1 GiB), and a
server writes each transaction contiguously at commit, so this is a total commit order as an
int64. The commit time is the commit event's timestamp. GTIDs were the alternative: MariaDB's
domain-server-seq is ordered only within one domain and MySQL's UUID:N sets are no order at all,
while file/position works on every server, with or without GTIDs. Positions belong to one server:
after a failover to another server, add the tables again.

**Resume.** Every seq this source produces, and every `Progress` seq (heartbeats, rotations), is
an event boundary: the position right after the last event it covers. `stream(from_seq)` asks
the server for the binlog from exactly that file and position, so the first transaction it
delivers is the first one after the durable position: nothing skipped, nothing read twice. When
nothing is durable yet the stream starts at the oldest copy position of its tables (or, with no
tables, at the server's current position). `confirm` has nothing to tell the server: the durable
position is the replica's own. Binlogs must be kept (`expire_logs_days` / `binlog_expire_logs_seconds`)
longer than the service may be down; a purged position is an error that says so.

**Transactions.** The seq is known only at the commit event, after the rows, so the stream
reads a whole transaction (spilling it to a temporary file when it is large) and
then emits `Begin(seq)`, its `RowChange`s and `Commit(seq)`. Updates carry the before image as
`old`, so key changes work. `TRUNCATE` statements become a `Truncate` in a transaction of their
own. A reader thread decodes while the service applies; `poll` takes from its queue.

**Heartbeats.** The server is asked for a heartbeat every `HEARTBEAT_S` seconds while idle; a
heartbeat (and a rotation, and the commit of a transaction that touched no HTAP table) carries
the position up to which everything has been sent, which becomes a `Progress`, so safe seqs keep
moving on an idle or busy-elsewhere server.

**Schema.** The binlog carries column types, not names (unless `binlog_row_metadata=FULL`): the
stream decodes a table's rows with the replica's column list (names, signedness, character
sets, enum and set values from `information_schema`) as long as the TableMap event's column
types agree with it. An `ALTER`/`DROP`/`RENAME` of an HTAP table (checked against
`information_schema` when the statement streams by) or a TableMap that no longer agrees emits
a `Relation` with the table's new columns; a column that kept its name but changed type is
reported as `name (now <type>)`.

**Initial copy.** MariaDB: `START TRANSACTION WITH CONSISTENT SNAPSHOT`, then
`SHOW STATUS LIKE 'binlog_snapshot_%'` gives the binlog position of exactly that snapshot with
no lock at all. MySQL: `FLUSH TABLES WITH READ LOCK` for the moment it takes to open the
snapshot and read `SHOW MASTER STATUS`, then `UNLOCK TABLES` (needs RELOAD). Rows are read with
a streaming cursor and turned into Arrow one column at a time. Tables must be InnoDB: other
engines have no consistent snapshot.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pymysql
import pymysql.converters
import pymysql.cursors
from pymysql.constants import FIELD_TYPE as PYMYSQL_FIELD_TYPE

from htap.conf import SourceConfig
from htap.connectors import mytypes
from htap.connectors.changes import (
    Begin,
    ChangeSource,
    ChangeStream,
    Commit,
    Event,
    Progress,
    Relation,
    Retention,
    RowChange,
    Truncate,
    decode_checked,
    python_values,
)
from htap.connectors.spool import TxnSpool
from htap.connectors.tables import Column, SourceTable
from htap.errors import NoSuchTableError, SourceError, TableError
from htap.seq import binlog_file_index, binlog_parts, binlog_seq, format_binlog

log = logging.getLogger(__name__)
# mysql-replication warns on every connection that binlog_row_metadata is not FULL: we do not need it.
logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)

COPY_CHUNK_ROWS = 100_000
HEARTBEAT_S = 1.0
QUEUE_EVENTS = 20_000
PROGRESS_EVERY_S = 0.2
COPY_ENGINES = ("InnoDB", "RocksDB")

# Zero dates and the like come back from the server as text the driver cannot parse: NULL, as the binlog has them.
_CONVERSIONS = dict(pymysql.converters.conversions)
for _code in (PYMYSQL_FIELD_TYPE.DATE, PYMYSQL_FIELD_TYPE.DATETIME, PYMYSQL_FIELD_TYPE.TIMESTAMP):
    _parse = _CONVERSIONS[_code]
    _CONVERSIONS[_code] = lambda v, _parse=_parse: (lambda r: None if isinstance(r, (str, bytes)) else r)(_parse(v))


# --- connections and checks ---------------------------------------------------------------------


def _describe(cfg: SourceConfig) -> str:
    return f"{cfg.user}@{cfg.host}:{cfg.port}" + (f"/{cfg.database}" if cfg.database else "")


def connect(cfg: SourceConfig, **kwargs) -> pymysql.connections.Connection:
    """An autocommit connection whose session time zone is UTC."""
    try:
        return pymysql.connect(
            host=cfg.host,
            port=cfg.port,
            user=cfg.user,
            password=cfg.password,
            database=cfg.database or None,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=10,
            init_command="SET time_zone = '+00:00'",
            conv=_CONVERSIONS,
            **kwargs,
        )
    except pymysql.err.MySQLError as e:
        raise SourceError(
            f"cannot connect to MySQL ({_describe(cfg)}): {_message(e)}; check the source's host, port, user, "
            f"password and database and that the server is up"
        ) from e


def _message(e: BaseException) -> str:
    if isinstance(e, pymysql.err.MySQLError) and len(e.args) >= 2:
        return f"{e.args[1]} (error {e.args[0]})"
    return str(e) or type(e).__name__


def server_is_mariadb(conn) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        return "mariadb" in cur.fetchone()[0].lower()


def binlog_settings(conn) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image')"
        )
        return {k.lower(): str(v) for k, v in cur.fetchall()}


def settings_problem(settings: dict[str, str]) -> str | None:
    """What keeps a server with these global settings from feeding a replica, with the fix."""
    if settings.get("log_bin", "OFF").upper() not in ("ON", "1"):
        return (
            "MySQL binary logging is off (log_bin=OFF), CDC reads the binlog: start the server with "
            "log_bin (e.g. log-bin=mysql-bin and server_id=1 in my.cnf) and restart it"
        )
    fmt = settings.get("binlog_format", "").upper()
    if fmt != "ROW":
        return (
            f"MySQL binlog_format is {fmt or 'unknown'!r}, CDC needs 'ROW': SET GLOBAL binlog_format = 'ROW' "
            f"and put binlog_format=ROW in my.cnf"
        )
    image = settings.get("binlog_row_image", "FULL").upper()
    if image != "FULL":
        return (
            f"MySQL binlog_row_image is {image!r}, CDC needs 'FULL' (whole rows in updates and deletes): "
            f"SET GLOBAL binlog_row_image = 'FULL' and put binlog_row_image=FULL in my.cnf"
        )
    return None


REPLICATION_SLAVE = ("REPLICATION SLAVE", "ALL PRIVILEGES")
REPLICATION_CLIENT = ("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER", "ALL PRIVILEGES")


def privileges(conn) -> tuple[str, set[str]]:
    """(current user, its global privileges: granted directly or listed by SHOW GRANTS ON *.*)."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        (user,) = cur.fetchone()
        name, _, host = user.rpartition("@")
        cur.execute(
            "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s",
            (f"'{name}'@'{host}'",),
        )
        privs = {r[0].upper() for r in cur.fetchall()}
        cur.execute("SHOW GRANTS")
        for (line,) in cur.fetchall():
            m = re.match(r"^GRANT (.+?) ON \*\.\* TO ", line, re.I)
            if m:
                privs |= {p.strip().upper() for p in m.group(1).split(",")}
    return user, privs


def privilege_problem(user: str, privs: set[str]) -> str | None:
    missing = []
    if not privs & set(REPLICATION_SLAVE):
        missing.append("REPLICATION SLAVE")
    if not privs & set(REPLICATION_CLIENT):
        missing.append("REPLICATION CLIENT")
    if not missing:
        return None
    name, _, host = user.rpartition("@")
    return (
        f"the source user {user} lacks {' and '.join(missing)} (needed to read the binlog): "
        f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'{host}'"
    )


def check_cdc_ready(conn) -> None:
    problem = settings_problem(binlog_settings(conn))
    if problem is None:
        problem = privilege_problem(*privileges(conn))
    if problem is not None:
        raise SourceError(problem)


def master_position(conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.2+
        except pymysql.err.ProgrammingError:
            cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if row is None:
        raise SourceError("MySQL binary logging is off (SHOW MASTER STATUS is empty): enable log_bin and restart the server")
    return row[0], int(row[1])


def binlog_files(conn) -> dict[int, str]:
    """index -> file name of every binlog file the server still has."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return {binlog_file_index(r[0]): r[0] for r in cur.fetchall()}


# --- tables -------------------------------------------------------------------------------------


def table_columns(conn, schema: str, table: str) -> list[tuple[str, str, bool, str | None]]:
    """(name, COLUMN_TYPE, nullable, character set) per column, in table order."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES', CHARACTER_SET_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        return [(n, t, bool(nullable), cs) for n, t, nullable, cs in cur.fetchall()]


def describe_table(conn, schema: str, table: str) -> tuple[list[Column], list[str]]:
    """Columns (in table order) and primary key of a source table."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema, table),
        )
        row = cur.fetchone()
        if row is None:
            raise NoSuchTableError(f"table {schema}.{table} does not exist in the source; check the name (<database>.<table>)")
        kind, engine = row
        if kind != "BASE TABLE":
            raise TableError(f"{schema}.{table} is not a table ({kind.lower()}); only tables can be HTAP tables")
        if engine not in COPY_ENGINES:
            raise TableError(
                f"{schema}.{table} uses the {engine} engine, which has no consistent snapshot for the initial copy: "
                f"ALTER TABLE {schema}.{table} ENGINE=InnoDB"
            )
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
            " AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, table),
        )
        key = [r[0] for r in cur.fetchall()]
    columns = [Column(name, typ, nullable) for name, typ, nullable, _cs in table_columns(conn, schema, table)]
    if not key:
        raise TableError(
            f"{schema}.{table} has no primary key; a replica applies updates and deletes by key: "
            f"add one (ALTER TABLE {schema}.{table} ADD PRIMARY KEY (...)) and add the table again"
        )
    return columns, key


# --- initial copy -------------------------------------------------------------------------------


def open_snapshot(conn, mariadb: bool) -> int:
    """Start a consistent-snapshot transaction on `conn`; the seq of the binlog position it reflects."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if mariadb:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {k.lower(): v for k, v in cur.fetchall()}
            log_file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
        else:
            try:
                cur.execute("FLUSH TABLES WITH READ LOCK")
            except pymysql.err.MySQLError as e:
                raise SourceError(
                    f"cannot take the brief global read lock that aligns the initial copy with the binlog: "
                    f"{_message(e)}; GRANT RELOAD ON *.* to the source user"
                ) from e
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                log_file, pos = master_position(conn)
            finally:
                cur.execute("UNLOCK TABLES")
    if not log_file:
        raise SourceError("the server reports no binlog position for the snapshot: is log_bin on?")
    return binlog_seq(log_file, pos)


def copy_chunks(conn, table: SourceTable) -> Iterator[pa.Table]:
    """The snapshot's rows of `table` as Arrow tables of the replica's schema; closes `conn` at the end."""
    schema = table.arrow_schema
    select = ", ".join(mytypes.copy_expression(c.name, c.source_type, c.override) for c in table.columns)
    query = f"SELECT {select} FROM {mytypes.quote_ident(table.schema)}.{mytypes.quote_ident(table.name)}"
    try:
        cur = conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(query)
        while True:
            rows = cur.fetchmany(COPY_CHUNK_ROWS)
            if not rows:
                break
            columns = list(zip(*rows))
            arrays = [decode_checked(python_values, col, f.type, f.name) for col, f in zip(columns, schema)]
            yield pa.Table.from_arrays(arrays, schema=schema)
        cur.close()
        conn.rollback()
    except pymysql.err.MySQLError as e:
        raise SourceError(f"initial copy of {table.qualified_name} failed: {_message(e)}") from e
    finally:
        conn.close()


# --- the change stream --------------------------------------------------------------------------


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
            raise SourceError(f"binlog stream of source {self.source.name} failed: {_message(item)}") from item
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


# --- the source ---------------------------------------------------------------------------------


class MySQLSource(ChangeSource):

    def __init__(self, config: SourceConfig):
        self.config = config

    def _conn(self):
        return connect(self.config)

    def check(self) -> None:
        conn = self._conn()
        try:
            check_cdc_ready(conn)
        finally:
            conn.close()

    def describe_table(self, schema: str, table: str) -> tuple[list[Column], list[str]]:
        conn = self._conn()
        try:
            return describe_table(conn, schema, table)
        finally:
            conn.close()

    def arrow_type(self, source_type: str) -> pa.DataType:
        return mytypes.arrow_type(source_type)

    def override_allowed(self, column: Column) -> bool:
        return mytypes.override_allowed(column.source_type)

    def prepare(self) -> None:
        """Nothing to create: the binlog is read from a position, like a replica does."""

    def initial_copy(self, table: SourceTable, work_dir: Path) -> tuple[int, Iterator[pa.Table]]:
        conn = self._conn()
        try:
            copy_seq = open_snapshot(conn, server_is_mariadb(conn))
        except pymysql.err.MySQLError as e:
            conn.close()
            raise SourceError(f"cannot start the initial copy of {table.qualified_name}: {_message(e)}") from e
        except BaseException:
            conn.close()
            raise
        log.info("initial copy of %s at %s", table.qualified_name, format_binlog(copy_seq))
        return copy_seq, copy_chunks(conn, table)

    def existing_rows_have_value(self, schema: str, table: str, column: str) -> bool:
        # InnoDB's instant ADD COLUMN gives existing rows the default without logging them.
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT COLUMN_DEFAULT IS NOT NULL AND COLUMN_DEFAULT <> 'NULL' FROM information_schema.COLUMNS"
                    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND COLUMN_NAME = %s",
                    (schema, table, column),
                )
                row = cur.fetchone()
                return True if row is None else bool(row[0])
        finally:
            conn.close()

    def stream(self, from_seq: int, tables: list[SourceTable]) -> ChangeStream:
        return MySQLStream(self.config, from_seq, tables)

    # --- operations -----------------------------------------------------------------------------

    def retention(self, position: int | None = None) -> Retention:
        """The binlog the replica has yet to read (the server keeps binlogs by its own expiry,
        not for the replica: nothing is retained on the replica's behalf)."""
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                files = [(binlog_file_index(r[0]), int(r[1])) for r in cur.fetchall()]
        except pymysql.err.MySQLError as e:
            raise SourceError(f"cannot list the binlogs of source {self.config.name}: {_message(e)}") from e
        finally:
            conn.close()
        note = "the server keeps binlogs by its own expiry (binlog_expire_logs_seconds), not for the replica"
        if position is None or not files:
            return Retention("binlog", None, None, None, None, note)
        idx, pos = binlog_parts(position)
        if idx < files[0][0]:
            return Retention("binlog", None, None, "purged", format_binlog(position),
                             "the binlog at the replica's position was purged: add the tables again")
        behind = sum(size - (pos if i == idx else 0) for i, size in files if i >= idx)
        return Retention("binlog", max(behind, 0), None, None, format_binlog(position), note)

    def drop(self) -> list[str]:
        return [
            f"nothing to drop in source {self.config.name}: a binlog reader keeps no state in MySQL/MariaDB "
            f"(the server expires binlogs by itself)"
        ]


