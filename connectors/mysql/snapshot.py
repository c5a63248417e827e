"""The initial copy: a consistent snapshot aligned with a binlog position, read in chunks."""

from __future__ import annotations

from typing import Callable, Iterator

import pyarrow as pa
import pymysql
import pymysql.converters
import pymysql.cursors

from htap.connectors import mytypes
from htap.connectors.changes import (
    decode_checked,
    python_values,
)
from htap.connectors.mysql.server import error_message, master_position
from htap.connectors.tables import SourceTable
from htap.errors import SourceError
from htap.seq import binlog_seq

COPY_CHUNK_ROWS = 100_000



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
                    f"{error_message(e)}; GRANT RELOAD ON *.* to the source user"
                ) from e
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                log_file, pos = master_position(conn)
            finally:
                cur.execute("UNLOCK TABLES")
    if not log_file:
        raise SourceError("the server reports no binlog position for the snapshot: is log_bin on?")
    return binlog_seq(log_file, pos)


def fetch_columns(conn, query: str, schema: pa.Schema, decode: Callable, chunk_rows: int) -> Iterator[list[pa.Array]]:
    """`query`'s rows streamed (server-side cursor) in chunks of `chunk_rows`, each as one Arrow
    array per field of `schema`, decoded by `decode` (a failing value names its column)."""
    cur = conn.cursor(pymysql.cursors.SSCursor)
    cur.execute(query)
    while True:
        rows = cur.fetchmany(chunk_rows)
        if not rows:
            break
        yield [decode_checked(decode, col, f.type, f.name) for col, f in zip(zip(*rows), schema)]
    cur.close()


def copy_chunks(conn, table: SourceTable) -> Iterator[pa.Table]:
    """The snapshot's rows of `table` as Arrow tables of the replica's schema; closes `conn` at the end."""
    schema = table.arrow_schema
    select = ", ".join(mytypes.copy_expression(c.name, c.source_type, c.override) for c in table.columns)
    query = f"SELECT {select} FROM {mytypes.quote_ident(table.schema)}.{mytypes.quote_ident(table.name)}"
    try:
        for arrays in fetch_columns(conn, query, schema, python_values, COPY_CHUNK_ROWS):
            yield pa.Table.from_arrays(arrays, schema=schema)
        conn.rollback()
    except pymysql.err.MySQLError as e:
        raise SourceError(f"initial copy of {table.qualified_name} failed: {error_message(e)}") from e
    finally:
        conn.close()
