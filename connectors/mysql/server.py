"""The MySQL/MariaDB server: connections, the checks CDC needs (binlog settings, privileges), positions, table descriptions."""

from __future__ import annotations

import logging
import re

import pymysql
import pymysql.converters
import pymysql.cursors
from pymysql.constants import FIELD_TYPE as PYMYSQL_FIELD_TYPE

from htap.conf import SourceConfig
from htap.connectors.tables import Column
from htap.errors import NoSuchTableError, SourceError, TableError
from htap.seq import binlog_file_index

log = logging.getLogger(__name__)

COPY_ENGINES = ("InnoDB", "RocksDB")  # engines whose tables a consistent snapshot can copy

# Zero dates and the like come back from the server as text the driver cannot parse: NULL, as the binlog has them.
_CONVERSIONS = dict(pymysql.converters.conversions)
for _code in (PYMYSQL_FIELD_TYPE.DATE, PYMYSQL_FIELD_TYPE.DATETIME, PYMYSQL_FIELD_TYPE.TIMESTAMP):
    _parse = _CONVERSIONS[_code]
    _CONVERSIONS[_code] = lambda v, _parse=_parse: (lambda r: None if isinstance(r, (str, bytes)) else r)(_parse(v))



def describe_server(cfg: SourceConfig) -> str:
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
            f"cannot connect to MySQL ({describe_server(cfg)}): {error_message(e)}; check the source's host, port, user, "
            f"password and database and that the server is up"
        ) from e


def error_message(e: BaseException) -> str:
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
        table_type, engine = row
        if table_type != "BASE TABLE":
            raise TableError(f"{schema}.{table} is not a table ({table_type.lower()}); only tables can be HTAP tables")
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
