"""The metadata store: HTAP tables, partitions, deltas, safe seqs, CDC positions, pins.

One repository class over two backends: SQLite in WAL mode (the embedded default) and Postgres
(for a shared, multi-node deployment). The SQL is written once with `?` placeholders and
`ON CONFLICT` clauses both understand; only the DDL's types and the way a write transaction
is serialized differ (SQLite: BEGIN IMMEDIATE; Postgres: an advisory transaction lock).

Every change that makes data visible is one transaction: the deltas a checkpoint wrote, the new
max safe seq of every table of the source and the source's durable CDC position commit
together, so a reader never sees a delta without its safe seq (or the reverse) and a restart
resumes exactly after the last durable checkpoint. Compaction replaces a delta set with one
guarded transaction (compare-and-swap on the inputs still being live).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sqlite3
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from htap.conf import is_postgres_location
from htap.errors import ConfigError, NoSuchTableError, ReplicaError, TableError
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    STATE_PENDING,
    STATE_STREAMING,
    Column,
    Delta,
    Layout,
    TableInfo,
)

SCHEMA_VERSION = 8
# Partition history: the layout (split points, partition ids) that holds from `from_seq` on, until
# the next one. Reads at a seq use the layout of that seq (htap.replica.repartition).
_LAYOUTS = (
    "layouts (table_id {int} NOT NULL, from_seq {int} NOT NULL, bounds TEXT, ids TEXT NOT NULL,"
    " created_at {real} NOT NULL, reason TEXT, PRIMARY KEY (table_id, from_seq))"
)
# Stores of these versions are upgraded in place when opened: version -> its statements.
_UPGRADES = {
    6: ["ALTER TABLE deltas ADD COLUMN checksum TEXT", "ALTER TABLE deltas ADD COLUMN dv_checksum TEXT"],
    7: ["ALTER TABLE deltas ADD COLUMN until_seq {int}", "ALTER TABLE tables ADD COLUMN partition_ids TEXT",
        f"CREATE TABLE IF NOT EXISTS {_LAYOUTS}"],
}
# The lease each process holds per (store, table): (pin id, created at, seq). See MetadataStore.lease.
_LEASES: dict[tuple[str, int], tuple[int, float, int]] = {}
_LEASES_LOCK = threading.Lock()
# `htap serve` writes a heartbeat this often; one older than SERVICE_STALE_S is a service that
# stopped without saying so (killed, host down).
SERVICE_BEAT_S = 5.0
SERVICE_STALE_S = 30.0


def running_services(beats: list[dict], now: float) -> list[dict]:
    """The services whose heartbeat (MetadataStore.service_beats) is recent enough to be running."""
    return [b for b in beats if now - b["beat_at"] <= SERVICE_STALE_S]


SAFE_POINT_EVERY_S = 1.0  # at most one seq <-> wall clock point per source per second
QUERY_READS_SOURCE = -1  # query_snapshots.seq of a query that reads a source itself (at an exported snapshot)
# Created on first use (stores made before it work unchanged): the exported source snapshot of a
# query that reads a source itself.
_SOURCE_SNAPSHOTS = (
    "query_source_snapshots (token TEXT NOT NULL, source TEXT NOT NULL, snapshot TEXT NOT NULL,"
    " created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (token, source))"
)
# Created on first use: where each separate source scan of a query read a source that cannot
# share a snapshot between connections (MySQL/MariaDB): its own snapshot's position, so scans of
# one query that saw different states are caught (`agree_source_read`).
_SOURCE_READS_COLUMNS = (
    "token TEXT NOT NULL, source TEXT NOT NULL, scan TEXT NOT NULL, attempt TEXT NOT NULL,"
    " what TEXT NOT NULL, seq BIGINT NOT NULL, position TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,"
    " PRIMARY KEY (token, source, scan, attempt)"
)
_SOURCE_READS = f"query_source_reads ({_SOURCE_READS_COLUMNS})"

_TABLES = [
    ("meta", "key TEXT PRIMARY KEY, value TEXT NOT NULL"),
    ("sources", "name TEXT PRIMARY KEY, position {int}, position_time {real}, updated_at {real} NOT NULL"),
    (
        "tables",
        "id {serial}, source TEXT NOT NULL, schema_name TEXT NOT NULL, table_name TEXT NOT NULL,"
        " columns_json TEXT NOT NULL, key_json TEXT NOT NULL, arrow_schema TEXT NOT NULL, state TEXT NOT NULL,"
        " copy_seq {int}, max_safe_seq {int}, max_safe_time {real}, error TEXT, partition_bounds TEXT,"
        " failover {int} NOT NULL DEFAULT 0, max_staleness_s {real}, schema_version {int} NOT NULL DEFAULT 1,"
        " partition_ids TEXT, created_at {real} NOT NULL,"
        " UNIQUE (source, schema_name, table_name)",
    ),
    (
        "deltas",
        "id {serial}, table_id {int} NOT NULL, part {int} NOT NULL DEFAULT 0, path TEXT NOT NULL UNIQUE,"
        " min_seq {int} NOT NULL, max_seq {int} NOT NULL, rows {int} NOT NULL, bytes {int} NOT NULL,"
        " partial_rows {int} NOT NULL DEFAULT 0, deletes {int} NOT NULL DEFAULT 0, unique_keys {int} NOT NULL DEFAULT 0,"
        " schema_version {int} NOT NULL DEFAULT 1,"
        " created_at {real} NOT NULL, retired_at {real}, checksum TEXT, dv_checksum TEXT, until_seq {int}",
    ),
    (_LAYOUTS.split(" ", 1)[0], _LAYOUTS.split(" ", 1)[1][1:-1]),
    ("truncations", "table_id {int} NOT NULL, seq {int} NOT NULL, PRIMARY KEY (table_id, seq)"),
    ("safe_points", "source TEXT NOT NULL, seq {int} NOT NULL, at {real} NOT NULL, PRIMARY KEY (source, seq)"),
    (
        "pins",
        "id {serial}, table_id {int} NOT NULL, seq {int} NOT NULL, holder TEXT NOT NULL,"
        " created_at {real} NOT NULL, expires_at {real} NOT NULL",
    ),
    (
        "query_snapshots",
        "token TEXT NOT NULL, source TEXT NOT NULL, seq {int} NOT NULL, created_at {real} NOT NULL,"
        " PRIMARY KEY (token, source)",
    ),
    (
        "scans",
        "id {serial}, table_id {int} NOT NULL, at {real} NOT NULL, route TEXT NOT NULL, seq {int},"
        " pushed_json TEXT NOT NULL, reason TEXT",
    ),
    # New stores have it from `htap init` (a role may be granted it); older ones get it from the
    # driver on a query's first failover (fix_query_source_snapshot).
    ("query_source_reads", _SOURCE_READS_COLUMNS),
]
_INDEXES = [
    "CREATE INDEX IF NOT EXISTS deltas_by_table ON deltas (table_id, part, max_seq)",
    "CREATE INDEX IF NOT EXISTS safe_points_by_time ON safe_points (source, at)",
]


@dataclass(frozen=True)
class NewDelta:
    table_id: int
    path: str
    min_seq: int
    max_seq: int
    rows: int
    bytes: int
    partial_rows: int = 0
    part: int = 0
    deletes: int = 0
    unique_keys: bool = False
    schema_version: int = 1
    checksum: str | None = None  # SHA-256 of the file (htap.replica.warehouse)
    dv_checksum: str | None = None  # of its deletion-vector sidecar; None: no sidecar


@dataclass(frozen=True)
class ScanRecord:
    table_id: int
    at: float
    route: str
    seq: int | None
    pushed: dict
    reason: str | None


@dataclass(frozen=True)
class Pin:
    id: int
    table_id: int
    seq: int
    holder: str
    created_at: float
    expires_at: float


def redact_url(location: str) -> str:
    """A store location fit for messages and logs: a URL's password replaced by ***."""
    try:
        url = urllib.parse.urlsplit(location)
        if url.password is None:
            return location
        netloc = url.netloc.replace(f":{url.password}@", ":***@", 1)
        return urllib.parse.urlunsplit(url._replace(netloc=netloc))
    except ValueError:
        return location


def holder_id() -> str:
    """Who holds a pin: host and process (a pin of a dead holder simply expires)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Backend:
    """What differs between SQLite and Postgres."""

    int_type = "INTEGER"
    real_type = "REAL"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def execute(self, sql: str, params=()):
        raise NotImplementedError

    def begin(self) -> None:
        raise NotImplementedError

    def relax(self) -> None:
        """Before `begin`: the next transaction may be lost in a crash (never corrupts)."""

    def relaxed(self) -> None:
        """After `begin` of a transaction that may be lost in a crash."""

    def restore(self) -> None:
        """After a relaxed transaction ended."""

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        self.execute("ROLLBACK")

    def close(self) -> None:
        raise NotImplementedError

    def ddl(self) -> list[str]:
        types = {"int": self.int_type, "real": self.real_type, "serial": self.serial}
        return [f"CREATE TABLE IF NOT EXISTS {name} ({cols.format(**types)})" for name, cols in _TABLES] + _INDEXES


class _SQLite(_Backend):
    def __init__(self, path: Path, read_only: bool = False):
        self.path = path
        if read_only:
            # SQLite itself refuses every write on this connection (a Spark executor's view).
            uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
            self.conn = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None, check_same_thread=False)
            return
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")

    def execute(self, sql: str, params=()):
        return self.conn.execute(sql, params)

    def begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")  # writers queue here instead of failing later

    # WAL mode with synchronous=NORMAL: the commit is not fsynced (a power loss may forget it)
    # but the database stays consistent. Settable per connection, outside a transaction.
    def relax(self) -> None:
        self.conn.execute("PRAGMA synchronous=NORMAL")

    def restore(self) -> None:
        self.conn.execute("PRAGMA synchronous=FULL")

    def close(self) -> None:
        self.conn.close()


class _Postgres(_Backend):
    int_type = "BIGINT"
    real_type = "DOUBLE PRECISION"
    serial = "BIGSERIAL PRIMARY KEY"
    LOCK_KEY = 0x6874617021  # serializes writers of one store, like SQLite's single writer

    def __init__(self, dsn: str, read_only: bool = False):
        import psycopg2

        try:
            self.conn = psycopg2.connect(dsn)
        except psycopg2.OperationalError as e:
            raise ConfigError(
                f"cannot connect to the metadata store at {redact_url(dsn)}: {str(e).strip().splitlines()[0]}"
            ) from e
        self.conn.autocommit = True
        if read_only:  # every statement of this session runs in a read-only transaction
            self.conn.set_session(readonly=True, autocommit=True)

    def execute(self, sql: str, params=()):
        cur = self.conn.cursor()
        cur.execute(sql.replace("?", "%s"), tuple(params))
        return cur

    def begin(self) -> None:
        self.execute("BEGIN")
        self.execute("SELECT pg_advisory_xact_lock(?)", (self.LOCK_KEY,))

    def relaxed(self) -> None:
        self.execute("SET LOCAL synchronous_commit = off")  # no wait for the WAL flush

    def close(self) -> None:
        self.conn.close()


def _columns_json(columns: list[Column]) -> str:
    return json.dumps([[c.name, c.source_type, c.nullable, c.added_version, c.override] for c in columns])


class MetadataStore:
    """Repository over the metadata database. Cheap to open; one per thread or process."""

    def __init__(
        self, location: str | Path, *, create: bool = False, clock: Callable[[], float] = time.time,
        read_only: bool = False,
    ):
        """`clock` (wall-clock seconds) stamps pins, retirements and safe points; tests inject a
        manual clock to drive pin expiry and the queryable window step by step. `read_only`: a
        Spark executor's view, which the database itself keeps from writing (SQLite `mode=ro`,
        a Postgres read-only session); every write method then fails naming the cause."""
        self.location = str(location)
        self.clock = clock
        self.read_only = read_only
        self._depth = 0  # open transaction() levels
        if read_only and create:
            raise ReplicaError("a read-only metadata store cannot be created")
        if is_postgres_location(location):
            self._db: _Backend = _Postgres(self.location, read_only)
        else:
            path = Path(location)
            if not create and not path.is_file():
                raise ReplicaError(f"no metadata store at {path}: run `htap init` first")
            if not read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
            self._db = _SQLite(path, read_only)
        if create:
            with self._tx():
                for statement in self._db.ddl():
                    self._db.execute(statement)
                self._db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
                    (str(SCHEMA_VERSION),),
                )
        else:
            self._check_version()

    def _check_version(self) -> None:
        try:
            row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        except Exception as e:  # noqa: BLE001 - any backend error here means "not a store"
            raise ReplicaError(f"{self.location} is not a spark-htap metadata store: run `htap init`") from e
        if row is not None and int(row[0]) in _UPGRADES:
            with self._tx():
                types = {"int": self._db.int_type, "real": self._db.real_type}
                for statement in _UPGRADES[int(row[0])]:
                    self._x(statement.format(**types))
                self._x("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(int(row[0]) + 1),))
            return self._check_version()
        if row is None or int(row[0]) != SCHEMA_VERSION:
            found = None if row is None else row[0]
            raise ReplicaError(
                f"metadata store {self.location} has schema version {found}, this spark-htap needs {SCHEMA_VERSION}: "
                f"re-create it with `htap init --force` and re-add the tables"
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "MetadataStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[None]:
        """One write transaction; `durable=False` for what a crash may forget (leases: their
        readers die with the crash), which then costs no fsync. Inside `transaction()` it is
        part of the caller's transaction (durable as that one is)."""
        if self._depth:
            yield
            return
        if self.read_only:
            raise ReplicaError(
                f"metadata store {redact_url(self.location)} is open read-only (a Spark executor's view): this write"
                " belongs to the driver or the service (a spark-htap bug; please report it)"
            )
        if not durable:
            self._db.relax()
        try:
            self._db.begin()
            self._depth += 1
            try:
                if not durable:
                    self._db.relaxed()
                yield
            except BaseException:
                self._depth -= 1
                self._db.rollback()
                raise
            self._depth -= 1
            self._db.commit()
        finally:
            if not durable:
                self._db.restore()

    def transaction(self, durable: bool = True):
        """One metadata transaction around several calls of this store (they join it): what the
        calls read and write is one consistent state, e.g. a scan's snapshot, window, pin and
        routing record (htap.pushdown.planning). `durable=False` as in `_tx`."""
        return self._tx(durable)

    def _x(self, sql: str, params=()):
        return self._db.execute(sql, params)

    def _one(self, sql: str, params=()):
        return self._x(sql, params).fetchone()

    def _all(self, sql: str, params=()) -> list:
        return self._x(sql, params).fetchall()

    # --- tables -------------------------------------------------------------------------------

    _TABLE_COLUMNS = (
        "id, source, schema_name, table_name, columns_json, key_json, arrow_schema, state, copy_seq,"
        " max_safe_seq, max_safe_time, error, partition_bounds, failover, max_staleness_s, schema_version,"
        " partition_ids"
    )

    def add_table(
        self, source: str, schema: str, name: str, columns: list[Column], key: list[str], arrow_schema: str
    ) -> TableInfo:
        with self._tx():
            if self._one(
                "SELECT 1 FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?", (source, schema, name)
            ):
                raise TableError(f"{schema}.{name} is already an HTAP table of source {source!r}")
            self._x(
                "INSERT INTO tables (source, schema_name, table_name, columns_json, key_json, arrow_schema,"
                " state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    source,
                    schema,
                    name,
                    _columns_json(columns),
                    json.dumps(key),
                    arrow_schema,
                    STATE_PENDING,
                    self.clock(),
                ),
            )
        return self.get_table(source, schema, name)

    def get_table(self, source: str, schema: str, name: str) -> TableInfo:
        row = self._one(
            f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?",
            (source, schema, name),
        )
        if row is None:
            known = ", ".join(t.qualified_name for t in self.list_tables(source)) or "none"
            raise NoSuchTableError(
                f"{schema}.{name} is not an HTAP table of source {source!r} (HTAP tables: {known}); "
                f"add it with `htap tables add {schema}.{name}`"
            )
        return self._table(row)

    def table_by_id(self, table_id: int) -> TableInfo:
        row = self._one(f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE id = ?", (table_id,))
        if row is None:
            raise NoSuchTableError(f"no HTAP table with id {table_id}")
        return self._table(row)

    def list_tables(self, source: str | None = None) -> list[TableInfo]:
        if source is None:
            rows = self._all(f"SELECT {self._TABLE_COLUMNS} FROM tables ORDER BY id")
        else:
            rows = self._all(f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE source = ? ORDER BY id", (source,))
        return [self._table(r) for r in rows]

    @staticmethod
    def _table(r: tuple) -> TableInfo:
        return TableInfo(
            id=r[0],
            source=r[1],
            schema=r[2],
            name=r[3],
            columns=tuple(Column(*c[:3], *c[3:]) for c in json.loads(r[4])),
            key=tuple(json.loads(r[5])),
            arrow_schema_b64=r[6],
            state=r[7],
            copy_seq=r[8],
            max_safe_seq=r[9],
            max_safe_time=r[10],
            error=r[11],
            partition_bounds_b64=r[12],
            failover=bool(r[13]),
            max_staleness_s=r[14],
            schema_version=r[15],
            partition_ids=None if r[16] is None else tuple(json.loads(r[16])),
        )

    def set_state(self, table_id: int, state: str, error: str | None = None) -> None:
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (state, error, table_id))

    def alter_schema(self, table_id: int, columns: list[Column], arrow_schema: str, version: int) -> None:
        """A new logical schema (metadata only: deltas keep their physical columns)."""
        with self._tx():
            self._x(
                "UPDATE tables SET columns_json = ?, arrow_schema = ?, schema_version = ? WHERE id = ?",
                (_columns_json(columns), arrow_schema, version, table_id),
            )

    def redefine(self, table_id: int, columns: list[Column], key: list[str], arrow_schema: str) -> None:
        """Start the table's schema history over (before a fresh copy, which leaves no deltas)."""
        with self._tx():
            self._x(
                "UPDATE tables SET columns_json = ?, key_json = ?, arrow_schema = ?, schema_version = 1 WHERE id = ?",
                (_columns_json([dataclasses.replace(c, added_version=1) for c in columns]), json.dumps(list(key)),
                 arrow_schema, table_id),
            )

    def resync(self, table_id: int, reason: str, columns: list[Column] | None = None) -> None:
        """Have the service copy the table again (a change the replica cannot follow in place,
        or a failed table after its cause was fixed); `columns`: new column choices (overrides)."""
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_PENDING, reason, table_id))
            if columns is not None:
                self._x("UPDATE tables SET columns_json = ? WHERE id = ?", (_columns_json(columns), table_id))

    def fail_table(self, table_id: int, error: str) -> None:
        """The table cannot be followed any more (see STATE_FAILED); `error` says why and what to do."""
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_FAILED, error, table_id))

    def remove_table(self, table_id: int) -> None:
        """Forget an HTAP table: its row, deltas, truncations, pins and scans (the caller deletes
        its files)."""
        with self._tx():
            for table, column in (("deltas", "table_id"), ("truncations", "table_id"), ("pins", "table_id"),
                                  ("scans", "table_id"), ("layouts", "table_id"), ("tables", "id")):
                self._x(f"DELETE FROM {table} WHERE {column} = ?", (table_id,))

    def forget_source(self, source: str) -> None:
        """Forget a source's position and safe points (its tables are removed one by one first)."""
        with self._tx():
            self._x("DELETE FROM sources WHERE name = ?", (source,))
            self._x("DELETE FROM safe_points WHERE source = ?", (source,))
            self._x("DELETE FROM query_snapshots WHERE source = ?", (source,))

    def set_failover(self, table_id: int, on: bool) -> None:
        with self._tx():
            self._x("UPDATE tables SET failover = ? WHERE id = ?", (1 if on else 0, table_id))

    def set_max_staleness(self, table_id: int, seconds: float | None) -> None:
        with self._tx():
            self._x("UPDATE tables SET max_staleness_s = ? WHERE id = ?", (seconds, table_id))

    def start_copy(self, table_id: int) -> list[str]:
        """Mark a table as copying and forget any deltas of an earlier, interrupted copy.

        Returns the paths of the forgotten delta files so the caller can delete them.
        """
        with self._tx():
            paths = [p for (p,) in self._all("SELECT path FROM deltas WHERE table_id = ?", (table_id,))]
            self._x("DELETE FROM deltas WHERE table_id = ?", (table_id,))
            self._x("DELETE FROM truncations WHERE table_id = ?", (table_id,))
            self._x("DELETE FROM layouts WHERE table_id = ?", (table_id,))
            self._x(
                "UPDATE tables SET state = ?, copy_seq = NULL, max_safe_seq = NULL, max_safe_time = NULL,"
                " error = NULL, partition_bounds = NULL, partition_ids = NULL WHERE id = ?",
                (STATE_COPYING, table_id),
            )
        return paths

    def finish_copy(self, table_id: int, deltas: list[NewDelta], copy_seq: int, partition_bounds: str | None) -> None:
        """The initial copy is durable: its deltas, partitions and seq become visible together."""
        with self._tx():
            self._insert_deltas(deltas)
            cur = self._x(
                "UPDATE tables SET state = ?, copy_seq = ?, partition_bounds = ?, partition_ids = NULL"
                " WHERE id = ? AND state = ?",
                (STATE_CATCHING_UP, copy_seq, partition_bounds, table_id, STATE_COPYING),
            )
            if cur.rowcount:
                layout = Layout.of(partition_bounds, None)
                self._x(
                    "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (table_id, from_seq) DO UPDATE SET bounds = excluded.bounds, ids = excluded.ids",
                    (table_id, copy_seq, partition_bounds, json.dumps(list(layout.ids)), self.clock(), "initial copy"),
                )

    # --- checkpoints and safe seqs --------------------------------------------------------------

    def commit_checkpoint(
        self,
        source: str,
        deltas: list[NewDelta],
        safe_seq: int,
        safe_time: float,
        truncations: list[tuple[int, int]] = (),
        failures: list[tuple[int, str]] = (),
    ) -> list[str]:
        """Make a checkpoint durable: its deltas and truncations (table id, seq), the tables that
        failed since the last checkpoint (table id, error), every other table's max safe seq, the
        source position — in one transaction.

        Tables still catching up become readable once the stream has passed their copy seq.
        Deltas of tables removed meanwhile are not recorded: their paths are returned (to delete).
        """
        with self._tx():
            for table_id, error in failures:
                self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_FAILED, error, table_id))
            live = {r[0] for r in self._all("SELECT id FROM tables WHERE source = ?", (source,))}
            orphans = [d.path for d in deltas if d.table_id not in live]
            self._insert_deltas([d for d in deltas if d.table_id in live])
            for table_id, seq in truncations:
                if table_id in live:
                    self._x(
                        "INSERT INTO truncations (table_id, seq) VALUES (?, ?) ON CONFLICT DO NOTHING", (table_id, seq)
                    )
            self._x(
                "UPDATE tables SET state = ? WHERE source = ? AND state = ? AND copy_seq <= ?",
                (STATE_STREAMING, source, STATE_CATCHING_UP, safe_seq),
            )
            self._x(
                "UPDATE tables SET max_safe_seq = ?, max_safe_time = ? WHERE source = ? AND state = ?",
                (safe_seq, safe_time, source, STATE_STREAMING),
            )
            self._x(
                "INSERT INTO sources (name, position, position_time, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
                " position_time = excluded.position_time, updated_at = excluded.updated_at",
                (source, safe_seq, safe_time, self.clock()),
            )
            last = self._one("SELECT max(at) FROM safe_points WHERE source = ?", (source,))[0]
            if last is None or safe_time - last >= SAFE_POINT_EVERY_S:
                self._x(
                    "INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (source, safe_seq, safe_time),
                )
        return orphans

    # --- manifests (htap.replica.manifest) -----------------------------------------------------

    # What a manifest keeps of each table, as rows by column name: enough to rebuild the store.
    _DUMPED = {
        "sources": ("name", "position", "position_time", "updated_at"),
        "tables": ("id", "source", "schema_name", "table_name", "columns_json", "key_json", "arrow_schema", "state",
                   "copy_seq", "max_safe_seq", "max_safe_time", "error", "partition_bounds", "failover",
                   "max_staleness_s", "schema_version", "partition_ids", "created_at"),
        "deltas": ("id", "table_id", "part", "path", "min_seq", "max_seq", "rows", "bytes", "partial_rows", "deletes",
                   "unique_keys", "schema_version", "created_at", "checksum", "dv_checksum", "retired_at", "until_seq"),
        "layouts": ("table_id", "from_seq", "bounds", "ids", "created_at", "reason"),
        "truncations": ("table_id", "seq"),
    }

    def dump_source(self, source: str) -> dict[str, list[dict]]:
        """One source's sources row, tables, partition layouts, the deltas reads may use (live
        ones, and those a repartition retired for reads below its seq) and truncations, read in
        one transaction (a consistent state: the position never lags the deltas it covers)."""
        mine = "table_id IN (SELECT id FROM tables WHERE source = ?)"
        where = {
            "sources": ("name = ?", (source,)),
            "tables": ("source = ?", (source,)),
            "deltas": (f"(retired_at IS NULL OR until_seq IS NOT NULL) AND {mine}", (source,)),
            "layouts": (mine, (source,)),
            "truncations": (mine, (source,)),
        }
        out = {}
        with self._tx():
            for name, columns in self._DUMPED.items():
                condition, params = where[name]
                rows = self._all(f"SELECT {', '.join(columns)} FROM {name} WHERE {condition}", params)
                out[name] = [dict(zip(columns, r)) for r in rows]
        return out

    def restore_source(self, dump: dict[str, list[dict]], floor: tuple[int, float] | None = None) -> None:
        """Insert a dumped source (ids kept: delta paths name their table's id) in one transaction;
        the store must not know the source yet. Its safe points: the recorded position, and
        `floor` (seq, time), which keeps the queryable window's low end at or above that seq."""
        with self._tx():
            if floor is not None:
                self._x("INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                        (dump["sources"][0]["name"], floor[0], floor[1]))
            for name, columns in self._DUMPED.items():
                for row in dump.get(name, []):
                    present = [c for c in columns if c in row]
                    extra = ", created_at" if name == "deltas" and "created_at" not in row else ""
                    values = [row[c] for c in present] + ([self.clock()] if extra else [])
                    self._x(f"INSERT INTO {name} ({', '.join(present)}{extra}) VALUES"
                            f" ({', '.join('?' for _ in values)})", values)
            for row in dump.get("sources", []):
                if row.get("position") is not None and row.get("position_time") is not None:
                    self._x("INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                            (row["name"], row["position"], row["position_time"]))
            if isinstance(self._db, _Postgres):  # explicit ids: move the sequences past them
                for name in ("tables", "deltas"):
                    self._x(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'),"
                            f" greatest((SELECT max(id) FROM {name}), 1))")

    def source_position(self, source: str) -> int | None:
        row = self._one("SELECT position FROM sources WHERE name = ?", (source,))
        return None if row is None else row[0]

    # --- the running services (`htap serve`): a heartbeat row each in `meta` ---------------------

    SERVICE_KEY = "service:"

    def beat_service(self, service_id: str, info: dict) -> None:
        """Record that service `service_id` (host:pid) runs, now (`htap status` tells a stopped
        service by its missing or old heartbeat). Not durable: a crash may forget one beat."""
        value = json.dumps({**info, "beat_at": self.clock()})
        with self._tx(durable=False):
            self._x("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (self.SERVICE_KEY + service_id, value))

    def end_service(self, service_id: str) -> None:
        """A service stopped cleanly: its heartbeat row goes."""
        with self._tx():
            self._x("DELETE FROM meta WHERE key = ?", (self.SERVICE_KEY + service_id,))

    def service_beats(self) -> list[dict]:
        """Every service's last heartbeat: {"id", "beat_at", ...what it recorded}, newest first."""
        rows = self._all("SELECT key, value FROM meta WHERE key LIKE ?", (self.SERVICE_KEY + "%",))
        beats = [{"id": key[len(self.SERVICE_KEY):], **json.loads(value)} for key, value in rows]
        return sorted(beats, key=lambda b: -b["beat_at"])

    def source_position_time(self, source: str) -> float | None:
        row = self._one("SELECT position_time FROM sources WHERE name = ?", (source,))
        return None if row is None else row[0]

    def seq_at(self, source: str, at: float) -> int | None:
        """The newest safe seq the source had reached at wall clock `at` (None if none yet)."""
        row = self._one("SELECT max(seq) FROM safe_points WHERE source = ? AND at <= ?", (source, at))
        return row[0]

    def time_of(self, source: str, seq: int) -> float | None:
        """The wall clock at which the source's safe seq first reached `seq`."""
        row = self._one("SELECT min(at) FROM safe_points WHERE source = ? AND seq >= ?", (source, seq))
        return row[0]

    def forget_safe_points(self, source: str, before: float) -> None:
        with self._tx():
            self._x("DELETE FROM safe_points WHERE source = ? AND at < ?", (source, before))

    # --- deltas ---------------------------------------------------------------------------------

    def _insert_deltas(self, deltas: list[NewDelta]) -> None:
        now = self.clock()
        for d in deltas:
            self._x(
                "INSERT INTO deltas (table_id, part, path, min_seq, max_seq, rows, bytes, partial_rows, deletes,"
                " unique_keys, schema_version, created_at, checksum, dv_checksum)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (d.table_id, d.part, d.path, d.min_seq, d.max_seq, d.rows, d.bytes, d.partial_rows, d.deletes,
                 int(d.unique_keys), d.schema_version, now, d.checksum, d.dv_checksum),
            )

    _DELTA_COLUMNS = (
        "id, table_id, part, path, min_seq, max_seq, rows, bytes, partial_rows, deletes, unique_keys, schema_version,"
        " checksum, dv_checksum, until_seq"
    )

    def deltas(self, table_id: int, part: int | None = None) -> list[Delta]:
        """Live deltas of a table (or of one partition), oldest first."""
        if part is None:
            rows = self._all(
                f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND retired_at IS NULL ORDER BY id",
                (table_id,),
            )
        else:
            rows = self._all(
                f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND part = ? AND retired_at IS NULL"
                " ORDER BY id",
                (table_id, part),
            )
        return [Delta(*r) for r in rows]

    def delta_paths(self, table_id: int) -> list[str]:
        """Every delta file the metadata references for the table, live or retired."""
        return [p for (p,) in self._all("SELECT path FROM deltas WHERE table_id = ?", (table_id,))]

    def deltas_at(self, table_id: int, seq: int) -> list[Delta]:
        """The deltas a read at `seq` may need, oldest first: the live ones, and those of
        partitions a repartition retired at a seq above `seq` (reads below it still use them).
        Which partitions a read uses is its layout's business (`layout_at`)."""
        rows = self._all(
            f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND (retired_at IS NULL OR until_seq > ?)"
            " ORDER BY id",
            (table_id, seq),
        )
        return [Delta(*r) for r in rows]

    # --- partition layouts --------------------------------------------------------------------

    def layout_at(self, table_id: int, seq: int) -> Layout:
        """The partition layout reads at `seq` use: the newest that holds from `seq` or before
        (the oldest there is for a seq before all of them)."""
        row = self._one(
            "SELECT bounds, ids, from_seq FROM layouts WHERE table_id = ? AND from_seq <= ? ORDER BY from_seq DESC LIMIT 1",
            (table_id, seq),
        ) or self._one("SELECT bounds, ids, from_seq FROM layouts WHERE table_id = ? ORDER BY from_seq LIMIT 1", (table_id,))
        if row is None:  # a table copied by hand (tests) without a layout row: its current one
            return self.table_by_id(table_id).layout
        return Layout(row[0], tuple(json.loads(row[1])), row[2])

    def layouts(self, table_id: int) -> list[tuple[Layout, str | None]]:
        """The table's partition history, oldest first, with why each layout came."""
        rows = self._all(
            "SELECT bounds, ids, from_seq, reason FROM layouts WHERE table_id = ? ORDER BY from_seq", (table_id,)
        )
        return [(Layout(b, tuple(json.loads(i)), f), why) for b, i, f, why in rows]

    def next_partition_id(self, table_id: int) -> int:
        """An id no partition of the table ever had (ids are never reused: old layouts keep theirs)."""
        used = [max(json.loads(ids), default=-1) for (ids,) in self._all("SELECT ids FROM layouts WHERE table_id = ?", (table_id,))]
        (top,) = self._one("SELECT max(part) FROM deltas WHERE table_id = ?", (table_id,))
        return max([-1, *used, -1 if top is None else top]) + 1

    def partition_stats(self, table_id: int) -> dict[int, tuple[int, int, int]]:
        """Per partition with live deltas: (deltas, row versions, delete versions)."""
        rows = self._all(
            "SELECT part, count(*), sum(rows), sum(deletes) FROM deltas WHERE table_id = ? AND retired_at IS NULL GROUP BY part",
            (table_id,),
        )
        return {p: (n, rows, deletes) for p, n, rows, deletes in rows}

    def commit_layout(
        self, table_id: int, old: Layout, new: Layout, retire: list[Delta], add: list[NewDelta], reason: str
    ) -> bool:
        """Make a repartition visible in one transaction: the new layout holds from `new.from_seq`
        on, the old partitions' deltas (`retire`: every live one) are retired for reads at seqs
        below it, and the new partitions' deltas appear. Returns False (and changes nothing) if
        the table's layout is no longer `old` or some delta to retire is no longer live (a
        re-copy, a compaction, another repartition won the race)."""
        with self._tx():
            row = self._one("SELECT partition_bounds, partition_ids FROM tables WHERE id = ?", (table_id,))
            if row is None:
                return False
            current = Layout.of(row[0], None if row[1] is None else json.loads(row[1]))
            if (current.bounds_b64, current.ids) != (old.bounds_b64, old.ids):
                return False
            gone = set(old.ids) - set(new.ids)
            if not gone:
                return False
            marks = ",".join("?" * len(gone))
            live = {r[0] for r in self._all(
                f"SELECT id FROM deltas WHERE table_id = ? AND retired_at IS NULL AND part IN ({marks})", (table_id, *gone))}
            if live != {d.id for d in retire}:
                return False
            now = self.clock()
            if self._one("SELECT count(*) FROM layouts WHERE table_id = ?", (table_id,))[0] == 0:
                # A table copied before layouts were recorded: its first layout holds from its copy.
                (copy_seq,) = self._one("SELECT copy_seq FROM tables WHERE id = ?", (table_id,))
                self._x(
                    "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (table_id, from_seq) DO NOTHING",
                    (table_id, min(copy_seq or 0, new.from_seq), old.bounds_b64, json.dumps(list(old.ids)), now,
                     "initial copy"),
                )
            for d in retire:
                self._x("UPDATE deltas SET retired_at = ?, until_seq = ? WHERE id = ?", (now, new.from_seq, d.id))
            self._insert_deltas(add)
            self._x(
                "UPDATE tables SET partition_bounds = ?, partition_ids = ? WHERE id = ?",
                (new.bounds_b64, json.dumps(list(new.ids)), table_id),
            )
            self._x(
                "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (table_id, from_seq) DO UPDATE SET bounds = excluded.bounds, ids = excluded.ids,"
                " created_at = excluded.created_at, reason = excluded.reason",
                (table_id, new.from_seq, new.bounds_b64, json.dumps(list(new.ids)), now, reason),
            )
        return True

    def replace_deltas(self, table_id: int, old: list[Delta], new: list[NewDelta]) -> bool:
        """Swap a set of live deltas for their compacted replacement, atomically.

        Returns False (and changes nothing) when any input is no longer live: another compaction
        won the race. The inputs are retired, not deleted: pinned readers may still read them.
        """
        with self._tx():
            ids = [d.id for d in old]
            marks = ",".join("?" * len(ids))
            (live,) = self._one(
                f"SELECT count(*) FROM deltas WHERE table_id = ? AND retired_at IS NULL AND id IN ({marks})",
                (table_id, *ids),
            )
            if live != len(ids):
                return False
            self._x(f"UPDATE deltas SET retired_at = ? WHERE id IN ({marks})", (self.clock(), *ids))
            self._insert_deltas(new)
        return True

    def truncated_at(self, table_id: int, seq: int) -> int | None:
        """The latest truncation of the table at or below `seq` (versions below it are gone)."""
        return self._one("SELECT max(seq) FROM truncations WHERE table_id = ? AND seq <= ?", (table_id, seq))[0]

    def delta_stats(self, table_id: int) -> tuple[int, int, int]:
        """(number of live deltas, row versions, bytes) of a table."""
        n, rows, size = self._one(
            "SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(bytes), 0) FROM deltas"
            " WHERE table_id = ? AND retired_at IS NULL",
            (table_id,),
        )
        return n, rows, size

    # --- pins (leases) and garbage collection ----------------------------------------------------

    def pin(self, table_id: int, seq: int, ttl_s: float, holder: str | None = None) -> tuple[Pin, list[Delta]]:
        """Lease `seq` of a table for `ttl_s` and return the deltas a read at `seq` may need at
        that moment (`deltas_at`), in one transaction. While the lease lives (`renew_pin` extends
        it), no delta in that list is deleted, even if compaction or a repartition retires it.

        Not fsynced: a crash that forgets a lease is a crash of the machine its readers ran on
        (SQLite), or of a Postgres store that then loses at most its last fraction of a second.
        """
        now = self.clock()
        with self._tx(durable=False):
            deltas = self.deltas_at(table_id, seq)
            row = self._one(
                "INSERT INTO pins (table_id, seq, holder, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
                (table_id, seq, holder or holder_id(), now, now + ttl_s),
            )
        return Pin(row[0], table_id, seq, holder or holder_id(), now, now + ttl_s), deltas

    def lease(self, table_id: int, seq: int, lease_s: float, holder: str | None = None) -> tuple[int, list[Delta]]:
        """A lease covering a read of the table now, and the deltas a read at `seq` may need.

        With a `holder` (a Spark query's scan, see htap.replica.leases.query_holder): a lease of
        its own, which the driver renews while the query runs and releases when it ends
        (`renew_held`, `release_held`). Without one: the lease this process took for the table
        less than `lease_s / 2` ago if there is one (no write at all: it protects every delta
        retired since it was taken, and lives at least `lease_s / 2` more), else a new one; so a
        process writes at most one (unsynced) lease per table per `lease_s / 2`, however many
        reads it plans, and the lease ends by expiry `lease_s` after its last renewal. A read at
        a seq below the held lease's takes a new one: the deltas of partitions a repartition
        retired are kept for the seqs below it that live leases hold."""
        if holder is not None:
            pin, deltas = self.pin(table_id, seq, lease_s, holder)
            return pin.id, deltas
        key = (self.location, table_id)
        now = self.clock()
        with _LEASES_LOCK:
            held = _LEASES.get(key)
            if held is not None and 0 <= now - held[1] < lease_s / 2 and seq >= held[2]:
                return held[0], self.deltas_at(table_id, seq)
            pin, deltas = self.pin(table_id, seq, lease_s)
            _LEASES[key] = (pin.id, pin.created_at, seq)
            return pin.id, deltas

    def renew_pin(self, pin_id: int, ttl_s: float) -> bool:
        """Extend a live lease to at least `ttl_s` from now; False when it is gone (expired and
        collected, or released): the deltas it protected may be deleted already."""
        now = self.clock()
        with self._tx(durable=False):
            cur = self._x(
                "UPDATE pins SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END"
                " WHERE id = ? AND expires_at > ?",
                (now + ttl_s, now + ttl_s, pin_id, now),
            )
            return cur.rowcount > 0

    def release_pin(self, pin_id: int) -> None:
        with self._tx(durable=False):
            self._x("DELETE FROM pins WHERE id = ?", (pin_id,))

    def renew_held(self, holders: list[str], ttl_s: float) -> int:
        """Extend every live lease of these holders to at least `ttl_s` from now; how many."""
        if not holders:
            return 0
        now = self.clock()
        marks = ", ".join("?" * len(holders))
        with self._tx(durable=False):
            cur = self._x(
                "UPDATE pins SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END"
                f" WHERE holder IN ({marks}) AND expires_at > ?",
                (now + ttl_s, now + ttl_s, *holders, now),
            )
            return cur.rowcount

    def release_held(self, holders: list[str]) -> int:
        """End every lease of these holders (their query ended); how many there were."""
        if not holders:
            return 0
        marks = ", ".join("?" * len(holders))
        with self._tx(durable=False):
            return self._x(f"DELETE FROM pins WHERE holder IN ({marks})", tuple(holders)).rowcount

    def pin_alive(self, pin_id: int) -> bool:
        """Whether a lease still lives (a read: executors may ask)."""
        return self._one("SELECT 1 FROM pins WHERE id = ? AND expires_at > ?", (pin_id, self.clock())) is not None

    def live_pins(self, table_id: int | None = None) -> list[Pin]:
        now = self.clock()
        if table_id is None:
            rows = self._all("SELECT id, table_id, seq, holder, created_at, expires_at FROM pins WHERE expires_at > ?", (now,))
        else:
            rows = self._all(
                "SELECT id, table_id, seq, holder, created_at, expires_at FROM pins WHERE table_id = ? AND expires_at > ?",
                (table_id, now),
            )
        return [Pin(*r) for r in rows]

    def collect_garbage(self, window_low: dict[int, int] | None = None) -> list[str]:
        """Forget retired deltas no live pin can still read; return their paths to delete.

        A retired delta is still needed by any live pin taken before it was retired. One a
        repartition retired at seq S (`until_seq`) also serves reads below S: it stays while a
        live pin reads below S or the table's queryable window (`window_low`: table id -> its
        low end; tables missing there keep them) still reaches below S. Expired pins (their
        holder died or finished without releasing) are dropped first.
        """
        now = self.clock()
        window_low = window_low or {}
        with self._tx():
            self._x("DELETE FROM pins WHERE expires_at <= ?", (now,))
            rows = self._all(
                "SELECT d.id, d.path, d.table_id, d.until_seq FROM deltas d WHERE d.retired_at IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM pins p WHERE p.table_id = d.table_id AND (p.created_at <= d.retired_at"
                " OR (d.until_seq IS NOT NULL AND p.seq < d.until_seq)))"
            )
            rows = [(i, path) for i, path, table_id, until in rows
                    if until is None or (table_id in window_low and window_low[table_id] >= until)]
            for delta_id, _ in rows:
                self._x("DELETE FROM deltas WHERE id = ?", (delta_id,))
        return [path for _, path in rows]

    # --- query snapshots ------------------------------------------------------------------------

    def query_snapshot(self, token: str, source: str, candidate: int) -> int:
        """The snapshot seq of one query on one source: the first scan to ask fixes it
        (`candidate`), every later scan of the same query gets the same seq."""
        now = self.clock()
        with self._tx(durable=False):  # lives as long as its query: a crash ends both
            self._x(
                "INSERT INTO query_snapshots (token, source, seq, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, candidate, now),
            )
            self._x("DELETE FROM query_snapshots WHERE created_at < ?", (now - 86_400,))
            return self._one("SELECT seq FROM query_snapshots WHERE token = ? AND source = ?", (token, source))[0]

    def fixed_query_snapshot(self, token: str, source: str) -> int | None:
        """The snapshot seq a query's first scan fixed on a source (QUERY_READS_SOURCE: the query
        reads that source itself, see `query_source_snapshot`), or None if none is fixed yet."""
        row = self._one("SELECT seq FROM query_snapshots WHERE token = ? AND source = ?", (token, source))
        return None if row is None else row[0]

    def fix_query_source_snapshot(self, token: str, source: str, snapshot: str) -> str:
        """Fix that a query reads `source` itself at the exported `snapshot`, unless a scan of the
        same query fixed something first; returns the source snapshot the query uses (None if
        the first scan fixed a replica seq)."""
        now = self.clock()
        with self._tx():
            self._x(f"CREATE TABLE IF NOT EXISTS {_SOURCE_SNAPSHOTS}")
            # Here, by the driver: the executors' scans record into it (agree_source_read), with a
            # role that may write that table only.
            self._x(f"CREATE TABLE IF NOT EXISTS {_SOURCE_READS}")
            self._x(
                "INSERT INTO query_snapshots (token, source, seq, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, QUERY_READS_SOURCE, now),
            )
            self._x(
                "INSERT INTO query_source_snapshots (token, source, snapshot, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, snapshot, now),
            )
            self._x("DELETE FROM query_source_snapshots WHERE created_at < ?", (now - 86_400,))
            return self.query_source_snapshot(token, source)

    def query_source_snapshot(self, token: str, source: str) -> str | None:
        if self.fixed_query_snapshot(token, source) != QUERY_READS_SOURCE:
            return None
        row = self._one("SELECT snapshot FROM query_source_snapshots WHERE token = ? AND source = ?", (token, source))
        return row[0]

    def agree_source_read(
        self, token: str, source: str, scan: str, what: str, seq: int, position: str, attempt: str = ""
    ) -> list[tuple[str, str]]:
        """Record that scan `scan` (reading `what`) of query `token` reads `source` at its own
        snapshot `seq` (shown as `position`), and return the other scans of that query that read
        the source at a different seq, as (what, position): empty when they all agree.

        MySQL/MariaDB cannot hand a snapshot to another connection, so each separate scan of a
        failover query opens its own; only their agreement makes the query one state. The record
        and the read of the others are one transaction, and writers of a store are serialized
        (SQLite's single writer, the Postgres store's advisory lock), so of two disagreeing
        scans the one that records second sees the first: at least one fails. Attempts of one
        scan (a task retry, a speculative copy) are compared only with other scans, each attempt
        with every attempt of the others: whichever attempt's rows Spark keeps, a disagreement
        with it was seen (a stale failed attempt may fail a query, never let a mix through). Records go with age, like the query snapshots. The table exists:
        the driver made it when the query fixed its source snapshot (fix_query_source_snapshot)."""
        now = self.clock()
        with self._tx(durable=False):  # lives as long as its query: a crash ends both
            self._x(
                "INSERT INTO query_source_reads (token, source, scan, attempt, what, seq, position, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token, source, scan, attempt) DO UPDATE SET"
                " what = excluded.what, seq = excluded.seq, position = excluded.position, created_at = excluded.created_at",
                (token, source, scan, attempt, what, seq, position, now),
            )
            self._x("DELETE FROM query_source_reads WHERE created_at < ?", (now - 86_400,))
            rows = self._all(
                "SELECT DISTINCT what, position FROM query_source_reads WHERE token = ? AND source = ? AND scan <> ?"
                " AND seq <> ? ORDER BY what, position",
                (token, source, scan, seq),
            )
        return [(r[0], r[1]) for r in rows]

    # --- scans ----------------------------------------------------------------------------------

    def record_scan(self, table_id: int, route: str, seq: int | None, pushed: dict, reason: str | None = None) -> None:
        """Remember what a query's scan asked for and how it was routed (shown by status tools)."""
        with self._tx(durable=False):  # status information: losing the last ones in a crash is harmless
            self._x(
                "INSERT INTO scans (table_id, at, route, seq, pushed_json, reason) VALUES (?, ?, ?, ?, ?, ?)",
                (table_id, self.clock(), route, seq, json.dumps(pushed, sort_keys=True), reason),
            )
            self._x(
                "DELETE FROM scans WHERE table_id = ? AND id NOT IN"
                " (SELECT id FROM scans WHERE table_id = ? ORDER BY id DESC LIMIT 100)",
                (table_id, table_id),
            )

    def recent_scans(self, table_id: int, limit: int = 10) -> list[ScanRecord]:
        rows = self._all(
            "SELECT table_id, at, route, seq, pushed_json, reason FROM scans WHERE table_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (table_id, limit),
        )
        return [ScanRecord(t, at, route, seq, json.loads(p), reason) for t, at, route, seq, p, reason in rows]
