"""Postgres as a source: checks, table description, publication and slots, the initial copy.

CDC uses logical replication with the built-in `pgoutput` plugin. One slot and one publication
per source feed the change stream. Each table's initial copy runs at the snapshot exported by a
temporary slot created just for it, so the copy reflects exactly the commits before that slot's
consistent point and the main stream supplies every commit from that point on: no gap and no
duplicate (the stream skips a table's changes at or below its copy seq).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import select
import struct
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Iterator

import psycopg2
import psycopg2.extras
import pyarrow as pa
import sqlglot
from psycopg2 import sql
from sqlglot import exp

from htap.conf import SourceConfig
from htap.connectors import pgcopy, pgoutput
from htap.connectors.changes import (
    Begin,
    ChangeSource,
    ChangeStream,
    Commit,
    Event,
    Progress,
    Relation,
    Retention,
    RowBatch,
    RowChange,
    Truncate,
)
from htap.connectors.pgheartbeat import Heartbeat
from htap.connectors.pgstreaming import StreamedTxn
from htap.connectors.pgtypes import SESSION_SETTINGS, arrow_type, decode_text_column, replica_value_sql
from htap.connectors.pgwal import WalConnection, WalError
from htap.connectors.queryable import QueryableSource, SourceSnapshot
from htap.connectors.tables import Column, SourceTable
from htap.errors import AccessError, NoSuchTableError, SourceError, TableError
from htap.seq import int_to_lsn, lsn_to_int

log = logging.getLogger(__name__)


def redact(dsn: str) -> str:
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


def connect(dsn: str, *, replication: bool = False):
    """A connection in autocommit mode with the session settings text decoding relies on."""
    try:
        if replication:
            return psycopg2.connect(
                dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection, options=SESSION_SETTINGS
            )
        conn = psycopg2.connect(dsn, options=SESSION_SETTINGS)
        conn.autocommit = True
        return conn
    except psycopg2.OperationalError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(
            f"cannot connect to Postgres ({redact(dsn)}): {first}; check the source's dsn and that the server is up"
        ) from e


def check_cdc_ready(conn) -> None:
    """Fail with the fix when the server cannot do logical replication."""
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        (level,) = cur.fetchone()
        if level != "logical":
            raise SourceError(
                f"Postgres wal_level is {level!r}, logical replication needs 'logical': run "
                f"ALTER SYSTEM SET wal_level = 'logical'; then restart Postgres"
            )
        cur.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:
            raise SourceError("the source user lacks the REPLICATION attribute: ALTER ROLE <user> REPLICATION")


def describe_table(conn, schema: str, table: str) -> tuple[list[Column], list[str]]:
    """Columns (in table order) and primary key of a source table."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (schema, table),
        )
        row = cur.fetchone()
        if row is None:
            raise NoSuchTableError(f"table {schema}.{table} does not exist in the source; check the name")
        oid, kind = row
        if kind not in ("r", "p"):
            raise TableError(f"{schema}.{table} is not a table (relkind {kind!r}); only tables can be HTAP tables")
        cur.execute(
            "SELECT attname, format_type(atttypid, atttypmod), NOT attnotnull FROM pg_attribute"
            " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        )
        columns = [Column(name, typ, nullable) for name, typ, nullable in cur.fetchall()]
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
            " ON true JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.ord",
            (oid,),
        )
        key = [r[0] for r in cur.fetchall()]
    if not key:
        raise TableError(
            f"{schema}.{table} has no primary key; a replica applies updates and deletes by key: "
            f"add one (ALTER TABLE {schema}.{table} ADD PRIMARY KEY (...)) and add the table again"
        )
    return columns, key


def ensure_publication(conn, publication: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(publication)))
            log.info("created publication %s", publication)


def publish_table(conn, publication: str, schema: str, table: str) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
            (publication, schema, table),
        )
        if cur.fetchone() is None:
            cur.execute(
                sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    sql.Identifier(publication), sql.Identifier(schema, table)
                )
            )
            log.info("added %s.%s to publication %s", schema, table, publication)


def ensure_slot(dsn: str, slot: str) -> None:
    """Create the source's logical replication slot (pgoutput) unless it exists."""
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            row = cur.fetchone()
            if row is not None:
                if row[0] != "pgoutput":
                    raise SourceError(f"replication slot {slot} uses plugin {row[0]!r}, not pgoutput: drop it or pick another slot name")
                return
            cur.execute("SELECT lsn FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            log.info("created replication slot %s at %s", slot, cur.fetchone()[0])
    finally:
        conn.close()


def copy_table(dsn: str, table: SourceTable, slot_name: str) -> tuple[int, Iterator[pa.Table]]:
    """Start a consistent copy: returns the copy seq and an iterator of chunks typed as the
    replica's Arrow schema (see `htap.connectors.pgcopy`).

    The iterator holds the exporting replication connection open until it is exhausted (the
    exported snapshot lives only as long as that connection).
    """
    repl = connect(dsn, replication=True)
    cur = repl.cursor()
    try:
        cur.execute(f'CREATE_REPLICATION_SLOT "{slot_name}" TEMPORARY LOGICAL pgoutput (SNAPSHOT \'export\')')
        _slot, consistent_point, snapshot, _plugin = cur.fetchone()
    except psycopg2.Error as e:
        repl.close()
        raise SourceError(f"cannot create a snapshot slot for the initial copy of {table.qualified_name}: {e}") from e
    # Commits at or after the consistent point reach us through the stream; the copy holds the rest.
    copy_seq = lsn_to_int(consistent_point) - 1
    return copy_seq, _copy_chunks(repl, dsn, snapshot, table)


def _copy_chunks(repl, dsn: str, snapshot: str, table: SourceTable) -> Iterator[pa.Table]:
    query = pgcopy.table_query(table.schema, table.name, [c.name for c in table.columns])
    try:
        for batch in pgcopy.read_arrow(dsn, query, table.arrow_schema, snapshot, what=f"initial copy of {table.qualified_name}"):
            yield pa.Table.from_batches([batch])
    finally:
        repl.close()  # releases the temporary slot


# Row change messages ('I', 'U', 'D') and the run lengths the stream batches (see PostgresStream._rows):
# below MIN_BATCH rows the fixed cost of a vectorized decode outweighs decoding row by row.
_ROW_TAGS = frozenset(b"IUD")
MIN_BATCH = 32
MAX_RUN = 8192
RUN_WAIT_S = 0.2  # at most this long waiting for the next message of a run (see _rows)
# A big transaction is streamed while it runs once its decoded changes take this much of the
# walsender's memory (`logical_decoding_work_mem`, 64 MB by default; a smaller setting is kept):
# what is left after its commit (up to this much) is received, decoded and buffered before its
# checkpoint can start: 16 MB took ~2 s of a 1M-row UPDATE's catch-up under load, 64 MB ~5-6 s.
STREAM_AFTER_KB = 16 * 1024


class PostgresStream(ChangeStream):
    """pgoutput over a replication connection, translated into the unified change model.

    On Postgres 14 and later it asks for protocol 2 with `streaming 'on'`: a big transaction
    arrives while it runs, block by block, and is kept (`htap.connectors.pgstreaming`) until its
    commit, when it is delivered as one ordinary transaction."""

    def __init__(self, source: SourceConfig, from_seq: int):
        self.source = source
        try:
            self.wal = WalConnection(source.dsn, SESSION_SETTINGS)
        except WalError as e:
            raise SourceError(
                f"cannot connect to Postgres ({redact(source.dsn)}): {_first_line(e)}; check the source's dsn and that "
                f"the server is up"
            ) from e
        self.streaming = self.wal.server_version >= 140000
        options = {"proto_version": "1", "publication_names": source.publication}
        try:
            if self.streaming:
                options |= {"proto_version": "2", "streaming": "on"}
                self._stream_sooner()
            self.wal.start(source.slot, options)
        except WalError as e:
            self.wal.close()
            detail = _first_line(e)
            if "is active for PID" in detail:
                raise SourceError(
                    f"cannot stream source {source.name}: {detail}: another `htap serve` (or another client) is "
                    f"reading slot {source.slot}; stop it, or give this source another slot name"
                ) from e
            raise SourceError(f"cannot start streaming source {source.name} from slot {source.slot}: {detail}") from e
        self.relations: dict[int, tuple[str, str]] = {}
        self.in_txn = False
        self.progress = from_seq
        self.heartbeat = Heartbeat(lambda: connect(source.dsn))
        self.ahead: bytes | None = None  # a message read past the end of a run of row changes
        self.queue: deque[Event] = deque()  # the events of a short run, decoded one by one
        self.streamed: dict[int, StreamedTxn] = {}  # in-progress transactions by xid
        self.block: StreamedTxn | None = None  # the one whose stream block is being read
        self.replay: Iterator[Event] | None = None  # a committed streamed transaction's events

    def _stream_sooner(self) -> None:
        """Have this walsender stream a big transaction after STREAM_AFTER_KB of its changes (if
        its decoding memory is larger): less of it is left to send after its commit."""
        work_mem_kb = self.wal.value("SELECT setting::bigint FROM pg_settings WHERE name = 'logical_decoding_work_mem'")
        if int(work_mem_kb) > STREAM_AFTER_KB:
            self.wal.value(f"SET logical_decoding_work_mem = '{STREAM_AFTER_KB}kB'")

    def poll(self, timeout: float) -> Event | None:
        if self.replay is not None:
            event = next(self.replay, None)
            if event is not None:
                return event
            self.replay = None
        if self.queue:
            return self.queue.popleft()
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.ahead is not None:
                    payload, self.ahead = self.ahead, None
                else:
                    payload = self.wal.read()
                if payload is not None:
                    self.heartbeat.heard()
                    event = self._message(payload)
                    if event is not None:
                        return event
                    continue
                if not self.in_txn and self.wal.wal_end and self.wal.wal_end - 1 > self.progress:
                    # The server has sent everything before its sent position (keepalive or data;
                    # a streamed change's position too: the server decodes in WAL order, so it
                    # sent every commit before it).
                    self.progress = self.wal.wal_end - 1
                    return Progress(self.progress)
                if not self.in_txn:
                    self.heartbeat.tick(self.progress, self.request_progress)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                wait = left if self.in_txn else min(left, self.heartbeat.due_in())
                select.select([self.wal], [], [], max(wait, 0.001))
        except WalError as e:
            raise SourceError(stream_failure(self.source.name, self.progress, e)) from e

    def _message(self, payload: bytes) -> Event | None:
        """The event one message (and the run of row changes after it) makes, if any now: inside
        a stream block the events go to the block's transaction instead."""
        block = self.block
        if payload[0] in _ROW_TAGS:
            events = self._rows(payload, streamed=block is not None)
            if block is not None:
                block.add(struct.unpack_from("!I", payload, 1)[0], events)
                return None
            self.queue.extend(events[1:])
            return events[0]
        if block is not None:
            xid, m = pgoutput.decode_streamed(payload)
            if isinstance(m, pgoutput.StreamStop):
                self.block = None
            else:
                event = self._translate(m)  # Relation, Truncate; Begin and Commit never come here
                if event is not None:
                    block.add(xid if xid is not None else block.xid, [event])
            return None
        m = pgoutput.decode(payload)
        if isinstance(m, pgoutput.StreamStart):
            txn = self.streamed.get(m.xid)
            if txn is None or m.first_segment:
                if txn is not None:
                    txn.close()
                txn = self.streamed[m.xid] = StreamedTxn(m.xid)
            self.block = txn
            return None
        if isinstance(m, pgoutput.StreamCommit):
            txn = self.streamed.pop(m.xid, None)
            if txn is None:
                raise SourceError(
                    f"the replication stream of source {self.source.name} committed streamed transaction {m.xid} "
                    f"that it never started: the stream restarts from the last durable position"
                )
            self.progress = max(self.progress, m.commit_lsn)
            self.replay = itertools.chain(txn.events(), [Commit(m.commit_lsn, m.commit_time)])
            return Begin(m.commit_lsn, m.commit_time)
        if isinstance(m, pgoutput.StreamAbort):
            if m.subxid == m.xid:
                txn = self.streamed.pop(m.xid, None)
                if txn is not None:
                    txn.close()
            elif m.xid in self.streamed:
                self.streamed[m.xid].abort_subtransaction(m.subxid)
            return None
        return self._translate(m)

    def _rows(self, first: bytes, streamed: bool) -> list[Event]:
        """A row change message and the run of like messages already received after it (same
        table, same op, no old tuple; in a stream block, same subtransaction): one RowBatch when
        the run is long enough, else one event each. The message that ends the run is kept for
        the next poll."""
        at = 5 if streamed else 1  # the relation id (after the xid in a stream block)
        head = first[: at + 5]
        if head[0] == 0x44:  # 'D': the old key ('K') or old row ('O')
            heads, op = (b"D" + head[1:-1] + b"K", b"D" + head[1:-1] + b"O"), "delete"
        elif head[-1] == 0x4E:  # 'I', or 'U' without an old tuple: the key did not change
            heads, op = (b"I" + head[1:], b"U" + head[1:]), "upsert"
        else:  # an update with the old key or row: one by one (the applier compares keys)
            return [self._decode(first, streamed)]
        size = len(head)
        run = [first]
        read = self.wal.read
        waited_until = None
        while len(run) < MAX_RUN:
            payload = read()
            if payload is None:
                # The rest of the transaction (or of the stream block) is on its way, and none of
                # it is visible before its commit: waiting for it delays nothing, and keeps runs
                # long when the server sends slower than we read.
                now = time.monotonic()
                waited_until = waited_until or now + RUN_WAIT_S
                if now >= waited_until or not select.select([self.wal], [], [], waited_until - now)[0]:
                    break
                continue
            if payload[:size] in heads:
                run.append(payload)
            else:
                self.ahead = payload
                break
        if len(run) >= MIN_BATCH:
            columns = pgoutput.tuple_columns(run, size)
            if columns is not None:
                (relid,) = struct.unpack_from("!I", first, at)
                return [RowBatch(*self.relations[relid], op, columns)]
        return [self._decode(payload, streamed) for payload in run]

    def _decode(self, payload: bytes, streamed: bool) -> Event | None:
        return self._translate(pgoutput.decode_streamed(payload)[1] if streamed else pgoutput.decode(payload))

    def _translate(self, m) -> Event | None:
        if isinstance(m, pgoutput.Begin):
            self.in_txn = True
            return Begin(m.commit_lsn, m.commit_time)
        if isinstance(m, pgoutput.Commit):
            self.in_txn = False
            self.progress = max(self.progress, m.commit_lsn)
            return Commit(m.commit_lsn, m.commit_time)
        if isinstance(m, pgoutput.Relation):
            self.relations[m.relid] = (m.schema, m.name)
            return Relation(m.schema, m.name, m.columns)
        if isinstance(m, pgoutput.Insert):
            return RowChange(*self.relations[m.relid], "upsert", m.new)
        if isinstance(m, pgoutput.Update):
            return RowChange(*self.relations[m.relid], "upsert", m.new, m.old)
        if isinstance(m, pgoutput.Delete):
            return RowChange(*self.relations[m.relid], "delete", m.old)
        if isinstance(m, pgoutput.Truncate):
            return Truncate(tuple(self.relations[r] for r in m.relids if r in self.relations))
        return None

    def confirm(self, seq: int) -> None:
        # The server skips, on restart, every transaction whose commit LSN is below this.
        self.wal.confirm(seq + 1)

    def request_progress(self) -> None:
        self.wal.request_reply()

    def close(self) -> None:
        self.heartbeat.close()
        self.wal.close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def stream_failure(source: str, position: int, e: WalError) -> str:
    """What to tell the user when the replication stream breaks. A lost connection (the server
    restarted or shut down, a network cut) shows up in libpq as a COPY_BOTH error without a
    message, or as a closed connection: say so, and that the service reconnects."""
    detail = _first_line(e)
    lost = (
        e.lost
        or "no message from the libpq" in detail
        or "server closed the connection" in detail
        or "terminating connection" in detail
    )
    if lost:
        return (
            f"the replication connection to source {source} was lost (the Postgres server restarted or shut down, "
            f"or the connection was cut; libpq: {detail}); the service reconnects and resumes after the last "
            f"durable position {int_to_lsn(position)}: nothing is lost"
        )
    return f"the replication stream of source {source} failed: {detail}"


_COLLATABLE = re.compile(r"^(text|character varying|varchar|citext|name)(\(\d+\))?$")
_BPCHAR = re.compile(r"^(character|char|bpchar)(\(\d+\))?$")


def code_point_text(expr: str, column: Column, target: pa.DataType) -> str:
    """A text column's replica value compared as Spark compares strings: by code point (the C
    collation, whatever the column's own), and char(n) as the padded text the replica holds
    (bpchar's comparisons would ignore the padding)."""
    if not pa.types.is_string(target):
        return expr
    t = column.source_type.strip().lower()
    if _BPCHAR.match(t) and not column.override:
        return f'(CASE WHEN {expr} IS NOT NULL THEN concat({expr}) END) COLLATE "C"'
    if column.override or _COLLATABLE.match(t):
        return f'({expr}) COLLATE "C"'
    return expr


class PostgresSource(ChangeSource, QueryableSource):
    dialect = "postgres"

    def queryable(self) -> QueryableSource:
        return self

    def relation(self, table: SourceTable) -> exp.Expression:
        """The table's rows as the replica holds them (each column's fate: NaN numerics as NULL,
        infinite dates as the ends of Spark's range, overridden columns as their replica type)."""
        types = table.arrow_schema
        columns = []
        for c in table.columns:
            expr = replica_value_sql(c.name, c.source_type, types.field(c.name).type, c.override)
            columns.append(sqlglot.parse_one(code_point_text(expr, c, types.field(c.name).type), read="postgres").as_(c.name, quoted=True))
        return exp.select(*columns).from_(super().relation(table)).subquery(exp.to_identifier(table.name, quoted=True))

    def read_query(self, query: str, output: pa.Schema, snapshot: str | None, what: str) -> Iterator[pa.RecordBatch]:
        return read_query(self.config.dsn, query, output, snapshot)

    def split_points(self, table: SourceTable, range_rows: int) -> list:
        """From the planner's statistics (pg_stats histogram of the first key column, pg_class
        row estimate): no scan. None until the table was analyzed (autovacuum does it)."""
        key0 = table.key[0]
        t = table.arrow_schema.field(key0).type
        array = "bigint[]" if pa.types.is_integer(t) else "text[]" if pa.types.is_string(t) else "date[]" if pa.types.is_date32(t) else None
        if array is None:
            return []
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT c.reltuples, s.histogram_bounds::text::{array} FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = %s"
                    " WHERE n.nspname = %s AND c.relname = %s",
                    (key0, table.schema, table.name),
                )
                row = cur.fetchone()
        finally:
            conn.close()
        if row is None or not row[1] or row[0] <= range_rows:
            return []
        bounds = row[1]
        n = min(len(bounds), -(-int(row[0]) // range_rows))
        return sorted({bounds[len(bounds) * i // n] for i in range(1, n)})

    def check_select(self, user: str, table: SourceTable, columns: list[str]) -> str | None:
        return check_select(self.config.dsn, user, table.schema, table.name, columns)

    def check_login(self, user: str, password: str) -> str:
        """Connect as `user` (the source's host, port and database) with `password`."""
        try:
            psycopg2.connect(self.config.dsn, user=user, password=password, connect_timeout=10).close()
        except psycopg2.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise AccessError(f"source role {user!r} cannot log in to source {self.config.name}: {first}") from e
        return user

    def server_process(self) -> int | str:
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                backend = cur.fetchone()[0]
            # Read while the connection is open: a closed connection's backend exits, and its
            # /proc entry with it (reading after close raced and sometimes found nothing).
            try:
                cmdline = Path(f"/proc/{backend}/cmdline").read_bytes().decode(errors="replace")
                stat = Path(f"/proc/{backend}/stat").read_text()
            except OSError:
                return "the source runs on another machine (its processes are not in /proc here)"
        finally:
            conn.close()
        if "postgres" not in cmdline:
            return "the source runs on another machine (its processes are not in /proc here)"
        return int(stat.rsplit(")", 1)[1].split()[1])  # the postmaster: the backend's parent

    def export_snapshot(self, *, exact_seq: bool = True) -> "PostgresSnapshot":
        return PostgresSnapshot(self.config) if exact_seq else PostgresQuerySnapshot(self.config)

    def decode_column(self, values: list, type: pa.DataType) -> pa.Array:
        # pgoutput delivers values in Postgres' text format.
        if not isinstance(values, pa.Array):
            values = pa.array(values, pa.string())
        return decode_text_column(values, type)

    def override_allowed(self, column: Column) -> bool:
        # Every path carries (or can carry) the value's text: string keeps it exactly, double and
        # decimal(p,s) parse it (a value that does not fit fails the table, naming it).
        return True

    def __init__(self, config: SourceConfig):
        self.config = config

    def _conn(self):
        return connect(self.config.dsn)

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

    def list_tables(self, schema: str) -> list[str]:
        conn = self._conn()
        try:
            with conn.cursor() as cur:  # tables and partitioned tables, not their partitions
                cur.execute(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1",
                    (schema,),
                )
                return [r[0] for r in cur.fetchall()]
        finally:
            conn.close()

    def arrow_type(self, source_type: str) -> pa.DataType:
        return arrow_type(source_type)

    def prepare(self) -> None:
        conn = self._conn()
        try:
            ensure_publication(conn, self.config.publication)
        finally:
            conn.close()
        ensure_slot(self.config.dsn, self.config.slot)

    def initial_copy(self, table: SourceTable, work_dir: Path) -> tuple[int, Iterator[pa.Table]]:
        conn = self._conn()
        try:
            publish_table(conn, self.config.publication, table.schema, table.name)
        finally:
            conn.close()
        return copy_table(self.config.dsn, table, slot_name=f"htap_copy_{table.id}_{os.getpid()}")

    def stream(self, from_seq: int, tables: list[SourceTable]) -> ChangeStream:
        return PostgresStream(self.config, from_seq)

    # --- operations -----------------------------------------------------------------------------

    def committed_seq(self, tables: list[tuple[str, str]]) -> int:
        """Everything committed so far is seq current - 1 (see PostgresStream.poll's progress);
        on an idle source the stream's heartbeat moves the safe seq past it within moments."""
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_current_wal_lsn()::text")
                (current,) = cur.fetchone()
        except psycopg2.Error as e:
            raise SourceError(f"cannot read the position of source {self.config.name}: {_first_line(e)}") from e
        finally:
            conn.close()
        return lsn_to_int(current) - 1

    def retention(self, position: int | None = None) -> Retention:
        slot = self.config.slot
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT pg_current_wal_lsn()::text, s.slot_name IS NOT NULL, s.active, s.active_pid, s.wal_status,"
                    " s.confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint"
                    " FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = %s",
                    (slot,),
                )
                current, exists, active, pid, wal_status, confirmed, retained = cur.fetchone()
        except psycopg2.Error as e:
            raise SourceError(f"cannot read the slot {slot} of source {self.config.name}: {_first_line(e)}") from e
        finally:
            conn.close()
        # Everything committed so far is seq current - 1 (see PostgresStream.poll's progress).
        lag = None if position is None else max(0, lsn_to_int(current) - 1 - position)
        if not exists:
            if position is None:
                return Retention(f"slot {slot}", note="no slot yet (`htap serve` creates it)")
            lost = (f"replication slot {slot} does not exist any more (dropped?), but the replica streamed from it up "
                    f"to {int_to_lsn(position)}: the changes since then are in no slot")
            return Retention(f"slot {slot}", state="missing", note=lost, lag_bytes=lag, lost=lost)
        note = lost = None
        if wal_status == "lost":
            note = lost = (f"replication slot {slot} was invalidated (wal_status lost): the server removed WAL the "
                           f"replica still needed (it kept more than max_slot_wal_keep_size)")
        elif wal_status == "unreserved":
            note = ("the slot keeps more WAL than max_slot_wal_keep_size: the server removes it at its next "
                    "checkpoint unless the replica catches up (then its tables are copied again)")
        elif not active:
            note = "no replica is connected: the slot keeps WAL until `htap serve` runs again or `htap sources drop`"
        return Retention(f"slot {slot}", int(retained) if retained is not None else None, bool(active), wal_status,
                         confirmed, note if note else (f"streaming to pid {pid}" if pid else None), lag, lost)

    def reset_log(self) -> str:
        # A lost slot cannot stream again: drop it, so that prepare() creates a new one.
        slot = self.config.slot
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                            " WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
                cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,))
                dropped = cur.rowcount > 0
        except psycopg2.Error as e:
            raise SourceError(f"cannot drop the lost slot {slot} of source {self.config.name}: {_first_line(e)}") from e
        finally:
            conn.close()
        return f"dropped the lost replication slot {slot}" if dropped else f"replication slot {slot} is gone"

    def unpublish(self, schema: str, table: str) -> str:
        publication = self.config.publication
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                    (publication, schema, table),
                )
                if cur.fetchone() is None:
                    return f"{schema}.{table} is not in publication {publication}: nothing to change in the source"
                cur.execute(sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
                    sql.Identifier(publication), sql.Identifier(schema, table)))
                return f"dropped {schema}.{table} from publication {publication}"
        finally:
            conn.close()

    def drop(self) -> list[str]:
        slot, publication = self.config.slot, self.config.publication
        done = []
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
                if row is not None and row[0]:
                    raise SourceError(
                        f"replication slot {slot} of source {self.config.name} is in use by process {row[1]}: stop "
                        f"`htap serve` first, then drop the source"
                    )
                if row is not None:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    done.append(f"dropped replication slot {slot}")
                else:
                    done.append(f"no replication slot {slot} to drop")
                cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
                if cur.fetchone() is not None:
                    cur.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
                    done.append(f"dropped publication {publication}")
                else:
                    done.append(f"no publication {publication} to drop")
        except psycopg2.Error as e:
            raise SourceError(f"cannot drop the slot and publication of source {self.config.name}: {_first_line(e)}") from e
        finally:
            conn.close()
        return done

    def existing_rows_have_value(self, schema: str, table: str, column: str) -> bool:
        # A default (stored as the column's "missing value", or a volatile one filled in by a
        # table rewrite) gives existing rows a value that no WAL record carries.
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT a.atthasmissing OR EXISTS (SELECT 1 FROM pg_attrdef d WHERE d.adrelid = a.attrelid"
                    " AND d.adnum = a.attnum) FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attname = %s",
                    (sql.Identifier(schema, table).as_string(conn), column),
                )
                row = cur.fetchone()
                return True if row is None else bool(row[0])
        finally:
            conn.close()


def check_select(dsn: str, user: str, schema: str, table: str, columns: list[str]) -> str | None:
    """None if `user` may SELECT `columns` of the table in the source, else why not.

    A table-level grant covers every column; otherwise each column needs a column-level grant,
    and a query that reads no column (`count(*)`) needs SELECT on any one column, as Postgres
    itself decides.
    """
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            qualified = sql.Identifier(schema, table).as_string(conn)
            try:
                cur.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", (user, qualified))
            except psycopg2.errors.UndefinedObject:
                return f"source role {user!r} does not exist"
            if cur.fetchone()[0]:
                return None
            if not columns:
                cur.execute("SELECT has_any_column_privilege(%s, %s, 'SELECT')", (user, qualified))
                return None if cur.fetchone()[0] else f"source role {user!r} lacks SELECT on {schema}.{table}"
            denied = []
            for col in columns:
                cur.execute("SELECT has_column_privilege(%s, %s, %s, 'SELECT')", (user, qualified, col))
                if not cur.fetchone()[0]:
                    denied.append(col)
            if denied:
                return f"source role {user!r} lacks SELECT on {schema}.{table} columns {denied}"
            return None
    finally:
        conn.close()


def read_query(dsn: str, query: str, output: pa.Schema, snapshot: str | None = None) -> Iterator[pa.RecordBatch]:
    """Run a query on the source (at an exported snapshot if given) and stream it as Arrow
    batches of `output`'s types (binary COPY through ADBC; see `htap.connectors.pgcopy`)."""
    return pgcopy.read_arrow(dsn, query, output, snapshot)


class PostgresSnapshot(SourceSnapshot):
    """One snapshot shared by the source and the replica, exactly.

    A replication connection creates a temporary logical slot that exports its snapshot:
    `CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')` returns a
    consistent point C and a snapshot name. A transaction that runs `SET TRANSACTION SNAPSHOT` on
    that name sees exactly the commits before C, which is the replica's state at seq C-1 (seq =
    commit LSN; the initial copy relies on the same fact). The exported snapshot lives only while
    the replication connection stays open and idle, so it is held open until closed.
    """

    def __init__(self, source: SourceConfig):
        self.source = source
        self.conn = connect(source.dsn, replication=True)
        slot = f"htap_verify_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            cur = self.conn.cursor()
            cur.execute(f'CREATE_REPLICATION_SLOT "{slot}" TEMPORARY LOGICAL pgoutput (SNAPSHOT \'export\')')
            _slot, point, name, _plugin = cur.fetchone()
        except psycopg2.Error as e:
            self.conn.close()
            raise SourceError(f"cannot export a snapshot of source {source.name} (a temporary replication slot): {e}") from e
        self.slot = slot
        self.name: str = name  # for SET TRANSACTION SNAPSHOT
        self.lsn: str = point  # the consistent point C
        self.seq: int = lsn_to_int(point) - 1  # the replica seq whose state equals the snapshot
        self.position = int_to_lsn(self.seq)

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()

    def to_dict(self) -> dict:
        return {**super().to_dict(), "consistent_point": self.lsn}

    def open_transaction(self):
        return _import_snapshot(self.source, self.name)


class PostgresQuerySnapshot(SourceSnapshot):
    """A snapshot for the reads of one failover query: `pg_export_snapshot()` in an open
    REPEATABLE READ transaction. Unlike `PostgresSnapshot` it needs no replication slot — creating
    a slot waits for every running write transaction to end and counts against
    `max_replication_slots` — and its seq is unknown, which a failover query does not need: its
    source reads only have to agree with each other."""

    def __init__(self, source: SourceConfig):
        self.source = source
        self.conn = connect(source.dsn)
        try:
            self.conn.autocommit = False
            with self.conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute("SELECT pg_export_snapshot(), pg_current_wal_lsn()::text")
                self.name, self.position = cur.fetchone()
        except psycopg2.Error as e:
            self.conn.close()
            raise SourceError(f"cannot export a snapshot of source {source.name}: {e}") from e
        self.seq = -1  # not tied to a replica seq (see the class docstring)

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()

    def open_transaction(self):
        return _import_snapshot(self.source, self.name)


def _import_snapshot(source: SourceConfig, name: str):
    """A connection in a read-only transaction at the exported snapshot `name`."""
    conn = connect(source.dsn)
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SET TRANSACTION SNAPSHOT %s", (name,))
    except psycopg2.Error as e:
        conn.close()
        raise SourceError(f"cannot import snapshot {name} on source {source.name}: {pgcopy.import_failure(e)}") from e
    return conn
