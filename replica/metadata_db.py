"""The metadata database: its schema (created, checked and upgraded in place), its two backends
and the one connection and transaction every part of the store uses (htap.replica.metadata).

SQLite in WAL mode (the embedded default) and Postgres (for a shared, multi-node deployment): the
SQL is written once with `?` placeholders and `ON CONFLICT` clauses both understand; only the
DDL's types and the way a write transaction is serialized differ (SQLite: BEGIN IMMEDIATE;
Postgres: an advisory transaction lock)."""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from htap.conf import is_postgres_location
from htap.errors import ConfigError, ReplicaError

SCHEMA_VERSION = 10
# Partition history: the layout (split points, partition ids) that holds from `from_seq` on, until
# the next one. Reads at a seq use the layout of that seq (htap.replica.repartition).
_LAYOUTS = (
    "layouts (table_id {int} NOT NULL, from_seq {int} NOT NULL, bounds TEXT, ids TEXT NOT NULL,"
    " created_at {real} NOT NULL, reason TEXT, PRIMARY KEY (table_id, from_seq))"
)
# Derived views (issue 31): a view is a row of `tables` of kind 'view' (its stored groups, read and
# kept like any replica table) and this row: the table it aggregates, its SQL and its parsed
# definition (htap.rewrite.views.ViewDefinition, JSON).
_VIEWS = (
    "views (table_id {int} PRIMARY KEY, base_id {int} NOT NULL, sql TEXT NOT NULL, definition TEXT NOT NULL,"
    " created_at {real} NOT NULL)"
)
# Stores of these versions are upgraded in place when opened: version -> its statements.
_UPGRADES = {
    6: ["ALTER TABLE deltas ADD COLUMN checksum TEXT", "ALTER TABLE deltas ADD COLUMN dv_checksum TEXT"],
    7: ["ALTER TABLE deltas ADD COLUMN until_seq {int}", "ALTER TABLE tables ADD COLUMN partition_ids TEXT",
        f"CREATE TABLE IF NOT EXISTS {_LAYOUTS}"],
    8: ["ALTER TABLE deltas ADD COLUMN column_stats TEXT"],
    9: ["ALTER TABLE tables ADD COLUMN kind TEXT NOT NULL DEFAULT 'table'", f"CREATE TABLE IF NOT EXISTS {_VIEWS}"],
}

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
        " partition_ids TEXT, created_at {real} NOT NULL, kind TEXT NOT NULL DEFAULT 'table',"
        " UNIQUE (source, schema_name, table_name)",
    ),
    (
        "deltas",
        "id {serial}, table_id {int} NOT NULL, part {int} NOT NULL DEFAULT 0, path TEXT NOT NULL UNIQUE,"
        " min_seq {int} NOT NULL, max_seq {int} NOT NULL, rows {int} NOT NULL, bytes {int} NOT NULL,"
        " partial_rows {int} NOT NULL DEFAULT 0, deletes {int} NOT NULL DEFAULT 0, unique_keys {int} NOT NULL DEFAULT 0,"
        " schema_version {int} NOT NULL DEFAULT 1,"
        " created_at {real} NOT NULL, retired_at {real}, checksum TEXT, dv_checksum TEXT, until_seq {int},"
        " column_stats TEXT",
    ),
    (_LAYOUTS.split(" ", 1)[0], _LAYOUTS.split(" ", 1)[1][1:-1]),
    (_VIEWS.split(" ", 1)[0], _VIEWS.split(" ", 1)[1][1:-1]),
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
        "query_tails",  # a query's pin of a source's in-memory tail (htap.replica.tail), as JSON
        "token TEXT NOT NULL, source TEXT NOT NULL, owner TEXT NOT NULL, pin TEXT NOT NULL,"
        " created_at {real} NOT NULL, PRIMARY KEY (token, source)",
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

class MetadataDatabase:
    """The connection to the metadata database and its transactions: what every part of the
    store (htap.replica.metadata) writes through. Cheap to open; one per thread or process."""

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
            if self.read_only:
                raise ReplicaError(
                    f"metadata store {self.location} has schema version {row[0]}, this spark-htap needs {SCHEMA_VERSION}:"
                    f" it is upgraded in place when `htap serve`, a Spark driver or any `htap` command opens it, but"
                    f" this process (a Spark executor) only reads it; restart `htap serve` after upgrading spark-htap")
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

    @property
    def on_postgres(self) -> bool:
        """Whether the database is Postgres (else SQLite): for what only one of them needs."""
        return isinstance(self._db, _Postgres)

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
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
