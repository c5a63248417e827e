"""The MySQL/MariaDB change source."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pymysql
import pymysql.converters
import pymysql.cursors

from htap.conf import SourceConfig
from htap.connectors import mytypes
from htap.connectors.changes import (
    ChangeSource,
    ChangeStream,
    Retention,
)
from htap.connectors.mysql.server import (
    check_cdc_ready,
    connect,
    describe_table,
    error_message,
    master_position,
    server_is_mariadb,
)
from htap.connectors.mysql.snapshot import copy_chunks, open_snapshot
from htap.connectors.mysql.stream import MySQLStream
from htap.connectors.queryable import QueryableSource
from htap.connectors.tables import Column, SourceTable
from htap.errors import SourceError
from htap.seq import binlog_file_index, binlog_parts, binlog_seq, format_binlog

log = logging.getLogger(__name__)



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

    def list_tables(self, schema: str) -> list[str]:
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                    " AND table_type = 'BASE TABLE' ORDER BY 1",
                    (schema,),
                )
                return [r[0] for r in cur.fetchall()]
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
            raise SourceError(f"cannot start the initial copy of {table.qualified_name}: {error_message(e)}") from e
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

    def committed_seq(self, tables: list[tuple[str, str]]) -> int:
        """The binlog's end now: the end of the newest commit event, which is that commit's seq
        (an idle server's heartbeats, every HEARTBEAT_S, carry the stream's position there)."""
        conn = self._conn()
        try:
            return binlog_seq(*master_position(conn))
        except pymysql.err.MySQLError as e:
            raise SourceError(
                f"cannot read the binlog position of source {self.config.name}: {error_message(e)}"
            ) from e
        finally:
            conn.close()

    def retention(self, position: int | None = None) -> Retention:
        """The binlog the replica has yet to read (the server keeps binlogs by its own expiry,
        not for the replica: nothing is retained on the replica's behalf)."""
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                files = [(binlog_file_index(r[0]), int(r[1])) for r in cur.fetchall()]
        except pymysql.err.MySQLError as e:
            raise SourceError(f"cannot list the binlogs of source {self.config.name}: {error_message(e)}") from e
        finally:
            conn.close()
        note = "the server keeps binlogs by its own expiry (binlog_expire_logs_seconds), not for the replica"
        if position is None or not files:
            return Retention("binlog", None, None, None, None, note)
        idx, pos = binlog_parts(position)
        if idx < files[0][0]:
            return Retention("binlog", None, None, "purged", format_binlog(position),
                             "the binlog at the replica's position was purged: add the tables again",
                             lost="the binlog at the replica's position was purged")
        behind = sum(size - (pos if i == idx else 0) for i, size in files if i >= idx)
        return Retention("binlog", max(behind, 0), None, None, format_binlog(position), note, lag_bytes=max(behind, 0))

    def drop(self) -> list[str]:
        return [
            f"nothing to drop in source {self.config.name}: a binlog reader keeps no state in MySQL/MariaDB "
            f"(the server expires binlogs by itself)"
        ]

    # --- the read side (failover, access checks, verification) ---------------------------------

    def queryable(self) -> QueryableSource:
        from htap.connectors.mysql.reads import MySQLQueryable

        return MySQLQueryable(self.config)
