"""The metadata store: HTAP tables, their deltas, safe seqs and the sources' CDC positions.

SQLite in WAL mode is the embedded default. Every change that makes data visible is one
transaction: the deltas a checkpoint wrote, the new max safe seq of every table of the source and
the source's durable CDC position commit together, so a reader never sees a delta without its
safe seq (or the reverse) and a restart resumes exactly after the last durable checkpoint.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from htap.errors import NoSuchTableError, ReplicaError, TableError
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_PENDING,
    STATE_STREAMING,
    Column,
    Delta,
    TableInfo,
)

SCHEMA_VERSION = 1

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
  name TEXT PRIMARY KEY,
  position INTEGER,            -- durable CDC position: every change up to it is in the replica
  position_time REAL,
  updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tables (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  source TEXT NOT NULL,
  schema_name TEXT NOT NULL,
  table_name TEXT NOT NULL,
  columns_json TEXT NOT NULL,
  key_json TEXT NOT NULL,
  arrow_schema TEXT NOT NULL,
  state TEXT NOT NULL,
  copy_seq INTEGER,
  max_safe_seq INTEGER,
  max_safe_time REAL,
  error TEXT,
  created_at REAL NOT NULL,
  UNIQUE (source, schema_name, table_name)
);
CREATE TABLE IF NOT EXISTS deltas (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  table_id INTEGER NOT NULL REFERENCES tables(id),
  path TEXT NOT NULL UNIQUE,
  min_seq INTEGER NOT NULL,
  max_seq INTEGER NOT NULL,
  rows INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  partial_rows INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS truncations (
  table_id INTEGER NOT NULL REFERENCES tables(id),
  seq INTEGER NOT NULL,           -- every version below it is gone (the same transaction may add rows)
  PRIMARY KEY (table_id, seq)
);
CREATE INDEX IF NOT EXISTS deltas_by_table ON deltas (table_id, max_seq);
CREATE TABLE IF NOT EXISTS scans (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  table_id INTEGER NOT NULL,
  at REAL NOT NULL,
  route TEXT NOT NULL,         -- 'replica' or 'source'
  seq INTEGER,
  pushed_json TEXT NOT NULL,
  reason TEXT
);
"""


@dataclass(frozen=True)
class NewDelta:
    table_id: int
    path: str
    min_seq: int
    max_seq: int
    rows: int
    bytes: int
    partial_rows: int = 0


@dataclass(frozen=True)
class ScanRecord:
    table_id: int
    at: float
    route: str
    seq: int | None
    pushed: dict
    reason: str | None


class MetadataStore:
    """Repository over the SQLite metadata database. Cheap to open; one per thread or process."""

    def __init__(self, path: str | Path, *, create: bool = False):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise ReplicaError(f"no metadata store at {self.path}: run `htap init` first")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        if create:
            self._conn.executescript(_DDL)
            self._conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so concurrent writers queue instead of failing."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # --- tables -------------------------------------------------------------------------------

    def add_table(
        self, source: str, schema: str, name: str, columns: list[Column], key: list[str], arrow_schema: str
    ) -> TableInfo:
        with self._tx() as c:
            try:
                c.execute(
                    "INSERT INTO tables (source, schema_name, table_name, columns_json, key_json, arrow_schema,"
                    " state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        source,
                        schema,
                        name,
                        json.dumps([[col.name, col.source_type, col.nullable] for col in columns]),
                        json.dumps(key),
                        arrow_schema,
                        STATE_PENDING,
                        time.time(),
                    ),
                )
            except sqlite3.IntegrityError as e:
                raise TableError(f"{schema}.{name} is already an HTAP table of source {source!r}") from e
        return self.get_table(source, schema, name)

    def get_table(self, source: str, schema: str, name: str) -> TableInfo:
        row = self._conn.execute(
            "SELECT * FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?", (source, schema, name)
        ).fetchone()
        if row is None:
            known = ", ".join(t.qualified_name for t in self.list_tables(source)) or "none"
            raise NoSuchTableError(
                f"{schema}.{name} is not an HTAP table of source {source!r} (HTAP tables: {known}); "
                f"add it with `htap tables add {schema}.{name}`"
            )
        return self._table(row)

    def table_by_id(self, table_id: int) -> TableInfo:
        row = self._conn.execute("SELECT * FROM tables WHERE id = ?", (table_id,)).fetchone()
        if row is None:
            raise NoSuchTableError(f"no HTAP table with id {table_id}")
        return self._table(row)

    def list_tables(self, source: str | None = None) -> list[TableInfo]:
        if source is None:
            rows = self._conn.execute("SELECT * FROM tables ORDER BY id").fetchall()
        else:
            rows = self._conn.execute("SELECT * FROM tables WHERE source = ? ORDER BY id", (source,)).fetchall()
        return [self._table(r) for r in rows]

    def _table(self, row: tuple) -> TableInfo:
        cols = [d[0] for d in self._conn.execute("SELECT * FROM tables LIMIT 0").description]
        r = dict(zip(cols, row))
        return TableInfo(
            id=r["id"],
            source=r["source"],
            schema=r["schema_name"],
            name=r["table_name"],
            columns=tuple(Column(n, t, bool(nullable)) for n, t, nullable in json.loads(r["columns_json"])),
            key=tuple(json.loads(r["key_json"])),
            arrow_schema_b64=r["arrow_schema"],
            state=r["state"],
            copy_seq=r["copy_seq"],
            max_safe_seq=r["max_safe_seq"],
            max_safe_time=r["max_safe_time"],
            error=r["error"],
        )

    def set_state(self, table_id: int, state: str, error: str | None = None) -> None:
        with self._tx() as c:
            c.execute("UPDATE tables SET state = ?, error = ? WHERE id = ?", (state, error, table_id))

    def start_copy(self, table_id: int) -> list[str]:
        """Mark a table as copying and forget any deltas of an earlier, interrupted copy.

        Returns the paths of the forgotten delta files so the caller can delete them.
        """
        with self._tx() as c:
            paths = [p for (p,) in c.execute("SELECT path FROM deltas WHERE table_id = ?", (table_id,))]
            c.execute("DELETE FROM deltas WHERE table_id = ?", (table_id,))
            c.execute(
                "UPDATE tables SET state = ?, copy_seq = NULL, max_safe_seq = NULL, max_safe_time = NULL,"
                " error = NULL WHERE id = ?",
                (STATE_COPYING, table_id),
            )
        return paths

    def finish_copy(self, table_id: int, deltas: list[NewDelta], copy_seq: int) -> None:
        """The initial copy is durable: its deltas and its seq become visible together."""
        with self._tx() as c:
            self._insert_deltas(c, deltas)
            c.execute(
                "UPDATE tables SET state = ?, copy_seq = ? WHERE id = ? AND state = ?",
                (STATE_CATCHING_UP, copy_seq, table_id, STATE_COPYING),
            )

    # --- checkpoints --------------------------------------------------------------------------

    def commit_checkpoint(
        self,
        source: str,
        deltas: list[NewDelta],
        safe_seq: int,
        safe_time: float,
        truncations: list[tuple[int, int]] = (),
    ) -> None:
        """Make a checkpoint durable: its deltas and truncations (table id, seq), every table's
        max safe seq, the source position — in one transaction.

        Tables still catching up become readable once the stream has passed their copy seq.
        """
        with self._tx() as c:
            self._insert_deltas(c, deltas)
            c.executemany("INSERT OR IGNORE INTO truncations (table_id, seq) VALUES (?, ?)", list(truncations))
            c.execute(
                "UPDATE tables SET state = ? WHERE source = ? AND state = ? AND copy_seq <= ?",
                (STATE_STREAMING, source, STATE_CATCHING_UP, safe_seq),
            )
            c.execute(
                "UPDATE tables SET max_safe_seq = ?, max_safe_time = ? WHERE source = ? AND state = ?",
                (safe_seq, safe_time, source, STATE_STREAMING),
            )
            c.execute(
                "INSERT INTO sources (name, position, position_time, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
                " position_time = excluded.position_time, updated_at = excluded.updated_at",
                (source, safe_seq, safe_time, time.time()),
            )

    def source_position(self, source: str) -> int | None:
        row = self._conn.execute("SELECT position FROM sources WHERE name = ?", (source,)).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def _insert_deltas(c: sqlite3.Connection, deltas: list[NewDelta]) -> None:
        now = time.time()
        c.executemany(
            "INSERT INTO deltas (table_id, path, min_seq, max_seq, rows, bytes, partial_rows, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(d.table_id, d.path, d.min_seq, d.max_seq, d.rows, d.bytes, d.partial_rows, now) for d in deltas],
        )

    def deltas(self, table_id: int) -> list[Delta]:
        rows = self._conn.execute(
            "SELECT id, table_id, path, min_seq, max_seq, rows, bytes, partial_rows FROM deltas"
            " WHERE table_id = ? ORDER BY id",
            (table_id,),
        ).fetchall()
        return [Delta(*r) for r in rows]

    def truncated_at(self, table_id: int, seq: int) -> int | None:
        """The latest truncation of the table at or below `seq` (versions below it are gone)."""
        row = self._conn.execute(
            "SELECT max(seq) FROM truncations WHERE table_id = ? AND seq <= ?", (table_id, seq)
        ).fetchone()
        return row[0]

    def delta_stats(self, table_id: int) -> tuple[int, int, int]:
        """(number of deltas, row versions, bytes) of a table."""
        n, rows, size = self._conn.execute(
            "SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(bytes), 0) FROM deltas WHERE table_id = ?",
            (table_id,),
        ).fetchone()
        return n, rows, size

    # --- scans --------------------------------------------------------------------------------

    def record_scan(self, table_id: int, route: str, seq: int | None, pushed: dict, reason: str | None = None) -> None:
        """Remember what a query's scan asked for and how it was routed (shown by status tools)."""
        with self._tx() as c:
            c.execute(
                "INSERT INTO scans (table_id, at, route, seq, pushed_json, reason) VALUES (?, ?, ?, ?, ?, ?)",
                (table_id, time.time(), route, seq, json.dumps(pushed, sort_keys=True), reason),
            )
            c.execute(
                "DELETE FROM scans WHERE table_id = ? AND id NOT IN"
                " (SELECT id FROM scans WHERE table_id = ? ORDER BY id DESC LIMIT 100)",
                (table_id, table_id),
            )

    def recent_scans(self, table_id: int, limit: int = 10) -> list[ScanRecord]:
        rows = self._conn.execute(
            "SELECT table_id, at, route, seq, pushed_json, reason FROM scans WHERE table_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (table_id, limit),
        ).fetchall()
        return [ScanRecord(t, at, route, seq, json.loads(p), reason) for t, at, route, seq, p, reason in rows]
