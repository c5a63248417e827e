"""MySQL/MariaDB as a queryable source: failover reads, access checks against the grant tables,
and snapshots aligned with a binlog position.

A source read runs the pushed plan, rendered in MySQL's dialect, over the table as the
replica holds it (each column's copy expression: FLOAT as an exact double, TIME and BIT as the
replica has them), and streams the rows back as Arrow batches.

Snapshots. `START TRANSACTION WITH CONSISTENT SNAPSHOT` pins a read view, and MariaDB reports
the binlog position it corresponds to (`binlog_snapshot_file/position`): the replica's state at
that seq (the initial copy relies on the same fact). Unlike Postgres, neither server can hand a
read view to another connection, so a snapshot is named by its binlog position, and a read at a
named snapshot opens its own consistent snapshot: at `binlog=<seq>` (verification) it proceeds
only if that sits at the same position, i.e. nothing committed in between, and otherwise fails,
saying so, rather than answering from another state; at `binlog:<seq>` (the snapshot a failover
query exports) it proceeds at any position not older, so a query's reads see every commit up to
seq but, unlike Postgres, not necessarily one single state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pymysql
import sqlglot
from sqlglot import exp

from htap.conf import MySQLConfig
from htap.connectors import mytypes
from htap.connectors.mysql.server import connect, error_message, server_is_mariadb
from htap.connectors.mysql.snapshot import fetch_columns, open_snapshot
from htap.connectors.queryable import QueryableSource, SourceSnapshot
from htap.connectors.tables import SourceTable
from htap.errors import AccessError, SourceError
from htap.seq import format_binlog

READ_CHUNK_ROWS = 65_536
# Snapshot names: `binlog=<seq>` exactly that snapshot (verification: the read fails if the source
# has moved on); `binlog:<seq>` a consistent snapshot at or after it (a failover query's reads:
# each sees every commit up to seq, none can be older, but two reads need not be at one point).
EXACT, AT_LEAST = "binlog=", "binlog:"


def arrow_column(values, type: pa.DataType) -> pa.Array:
    """Driver values as Arrow `type`: directly, or through Arrow's own cast when the server
    answers in a wider type (SUM over integers is a DECIMAL in MySQL, a bigint in Spark)."""
    try:
        return pa.array(values, type)
    except (pa.ArrowException, TypeError, ValueError):
        return pa.array(values).cast(type)


def snapshot_name(seq: int, exact: bool = False) -> str:
    return f"{EXACT if exact else AT_LEAST}{seq}"


def parse_snapshot_name(name: str) -> tuple[int, bool]:
    """(seq, exact) of a snapshot name."""
    for prefix, exact in ((EXACT, True), (AT_LEAST, False)):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):]), exact
    raise SourceError(f"snapshot {name!r} is not a MySQL/MariaDB snapshot (binlog=<seq> or binlog:<seq>)")


def begin_at(conn, name: str | None) -> int:
    """Open a consistent-snapshot transaction on `conn`; its seq. With `name`, it must be that
    snapshot (exact) or not older (see the module docstring)."""
    seq = open_snapshot(conn, server_is_mariadb(conn))
    if name is None:
        return seq
    wanted, exact = parse_snapshot_name(name)
    if seq != wanted and (exact or seq < wanted):
        conn.rollback()
        raise SourceError(
            f"the source has moved from snapshot {format_binlog(wanted)} to {format_binlog(seq)}: "
            f"MySQL/MariaDB cannot share a snapshot between connections, so reads at exactly one snapshot need a "
            f"source without commits meanwhile; retry"
        )
    return seq


class _Borrowed:
    """The snapshot's own connection, lent out: closing it is the snapshot's job."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def close(self) -> None:
        pass


class MySQLSnapshot(SourceSnapshot):
    """A consistent snapshot and its binlog position (held open until closed). Its transaction
    is the only one guaranteed to be at it, so queries at it share that one connection
    (`max_connections` 1); other connections can join only while nothing commits."""

    max_connections = 1

    def __init__(self, config: MySQLConfig):
        self.config = config
        self._lent = False  # the snapshot's own connection, once handed to open_transaction
        self.conn = connect(config)
        try:
            self.seq = begin_at(self.conn, None)
        except pymysql.err.MySQLError as e:
            self.conn.close()
            raise SourceError(f"cannot open a consistent snapshot of source {config.name}: {error_message(e)}") from e
        except BaseException:
            self.conn.close()
            raise
        self.name = snapshot_name(self.seq)
        self.position = format_binlog(self.seq)

    @property
    def exact_name(self) -> str:
        return snapshot_name(self.seq, exact=True)

    def close(self) -> None:
        if self.conn.open:
            self.conn.close()

    def open_transaction(self):
        if not self._lent:
            self._lent = True
            return _Borrowed(self.conn)
        conn = connect(self.config)
        try:
            begin_at(conn, self.exact_name)
        except BaseException:
            conn.close()
            raise
        return conn


class MySQLQueryable(QueryableSource):
    dialect = "mysql"

    def __init__(self, config: MySQLConfig, collation: str | None = None):
        self.config = config
        self._collation = collation  # found on first use when not given

    def relation(self, table: SourceTable) -> exp.Expression:
        """The table's rows as the replica holds them (the initial copy's expressions), so pushed
        filters and aggregates give what they give on the replica."""
        types = table.arrow_schema
        collation = self._binary_collation()
        columns = []
        for c in table.columns:
            expr = mytypes.copy_expression(c.name, c.source_type, c.override)
            if pa.types.is_string(types.field(c.name).type):
                expr = f"CONVERT({expr} USING utf8mb4) COLLATE {collation}"
            columns.append(sqlglot.parse_one(expr, read="mysql").as_(c.name, quoted=True))
        return exp.select(*columns).from_(super().relation(table)).subquery(exp.to_identifier(table.name, quoted=True))

    def _binary_collation(self) -> str:
        """The server's utf8mb4 collation that compares by code point without padding (as Spark
        does): MariaDB utf8mb4_nopad_bin, MySQL 8 utf8mb4_0900_bin (utf8mb4_bin pads)."""
        if self._collation is None:
            conn = connect(self.config)
            try:
                self._collation = "utf8mb4_nopad_bin" if server_is_mariadb(conn) else "utf8mb4_0900_bin"
            finally:
                conn.close()
        return self._collation

    def read_query(
        self, query: str, output: pa.Schema, snapshot: str | None, what: str, agree: Callable[[int], None] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """`agree`, given with a snapshot: called with the seq of the consistent snapshot this read
        opened, before any row is read; it raises when that is not the query's one state (the
        other scans of the query read elsewhere: htap.pushdown.source_reader.SourceReadAgreement)."""
        conn = connect(self.config)
        try:
            if snapshot is not None:
                seq = begin_at(conn, snapshot)
                if agree is not None:
                    agree(seq)
            for arrays in fetch_columns(conn, query, output, arrow_column, READ_CHUNK_ROWS):
                yield pa.RecordBatch.from_arrays(arrays, schema=output)
        except pymysql.err.MySQLError as e:
            raise SourceError(f"reading {what} from source {self.config.name} failed: {error_message(e)}") from e
        finally:
            conn.close()

    def check_login(self, user: str, password: str) -> str:
        """Connect as `user` (`name`, or `name@host` whose name is used) with `password`, and
        return the account the server authenticated (`CURRENT_USER()`, `name@host`): the one
        whose grants decide, whatever host the catalog named."""
        name = user.partition("@")[0]
        try:
            conn = pymysql.connect(host=self.config.host, port=self.config.port, user=name, password=password,
                                   connect_timeout=10)
        except pymysql.err.MySQLError as e:
            raise AccessError(f"source account {name!r} cannot log in to source {self.config.name}: {error_message(e)}") from e
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT CURRENT_USER()")
                return cur.fetchone()[0]
        finally:
            conn.close()

    def check_select(self, user: str, table: SourceTable, columns: list[str]) -> str | None:
        """Whether the account may SELECT those columns, from the grant tables the way the server
        decides it: a global, database or table grant covers every column, else each column needs
        a column grant. No columns (`count(*)`) needs a grant on any one column, as the server
        asks. `user` is `name@host` (host `%` when not given)."""
        name, _, host = user.partition("@")
        host = host or "%"
        conn = connect(self.config)
        try:
            with conn.cursor() as cur:
                try:
                    cur.execute("SELECT Select_priv = 'Y' FROM mysql.user WHERE User = %s AND Host = %s", (name, host))
                    row = cur.fetchone()
                    if row is None:
                        return f"source account '{name}'@'{host}' does not exist"
                    if row[0]:
                        return None
                    cur.execute(
                        "SELECT 1 FROM mysql.db WHERE User = %s AND Host = %s AND %s LIKE Db AND Select_priv = 'Y'",
                        (name, host, table.schema),
                    )
                    if cur.fetchone():
                        return None
                    cur.execute(
                        "SELECT 1 FROM mysql.tables_priv WHERE User = %s AND Host = %s AND Db = %s AND Table_name = %s"
                        " AND FIND_IN_SET('Select', Table_priv) > 0",
                        (name, host, table.schema, table.name),
                    )
                    if cur.fetchone():
                        return None
                    cur.execute(
                        "SELECT Column_name FROM mysql.columns_priv WHERE User = %s AND Host = %s AND Db = %s"
                        " AND Table_name = %s AND FIND_IN_SET('Select', Column_priv) > 0",
                        (name, host, table.schema, table.name),
                    )
                    allowed = {r[0].lower() for r in cur.fetchall()}
                except pymysql.err.MySQLError as e:
                    raise SourceError(
                        f"cannot read the grant tables of source {self.config.name} to check access: {error_message(e)}; "
                        f"GRANT SELECT ON mysql.* TO the source user, or remove the catalog's `user` option"
                    ) from e
        finally:
            conn.close()
        denied = [c for c in columns if c.lower() not in allowed]
        if denied or not allowed:
            return f"source account '{name}'@'{host}' lacks SELECT on {table.qualified_name}" + (
                f" columns {denied}" if denied else ""
            )
        return None

    def server_process(self) -> int | str:
        """From the server's pid file, when that file is on this machine (one process: mariadbd)."""
        conn = connect(self.config)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@pid_file")
                (pid_file,) = cur.fetchone()
        finally:
            conn.close()
        try:
            return int(Path(pid_file).read_text().strip())
        except (OSError, ValueError, TypeError):
            return "the source runs on another machine (its pid file is not here)"

    def export_snapshot(self, *, exact_seq: bool = True) -> MySQLSnapshot:
        # One kind only: a consistent snapshot is as cheap as it gets here, and carries its position.
        return MySQLSnapshot(self.config)
