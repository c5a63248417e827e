"""Postgres as a source: checks, table description, publication and slots, the initial copy.

CDC uses logical replication with the built-in `pgoutput` plugin. One slot and one publication
per source feed the change stream. Each table's initial copy runs at the snapshot exported by a
temporary slot created just for it, so the copy reflects exactly the commits before that slot's
consistent point and the main stream supplies every commit from that point on: no gap and no
duplicate (the stream skips a table's changes at or below its copy seq).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Iterator

import psycopg2
import psycopg2.extras
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg2 import sql

from htap.connectors.pgtypes import SESSION_SETTINGS, arrow_type
from htap.errors import NoSuchTableError, SourceError, TableError
from htap.replica.models import Column

log = logging.getLogger(__name__)

COPY_BATCH_BYTES = 16 << 20


def lsn_to_int(lsn: str) -> int:
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


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
    for c in columns:
        arrow_type(c.source_type)  # raises for an unsupported type, naming it
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


def copy_table(
    dsn: str, schema: str, table: str, columns: list[str], work_dir: Path, slot_name: str
) -> tuple[int, Iterator[pa.Table]]:
    """Start a consistent copy: returns the copy seq and an iterator of text-typed Arrow chunks.

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
        raise SourceError(f"cannot create a snapshot slot for the initial copy of {schema}.{table}: {e}") from e
    # Commits at or after the consistent point reach us through the stream; the copy holds the rest.
    copy_seq = lsn_to_int(consistent_point) - 1
    return copy_seq, _copy_chunks(repl, dsn, snapshot, schema, table, columns, work_dir)


def _copy_chunks(repl, dsn, snapshot, schema, table, columns, work_dir: Path) -> Iterator[pa.Table]:
    conn = connect(dsn)
    work_dir.mkdir(parents=True, exist_ok=True)
    spool = work_dir / f"copy-{schema}.{table}.csv"
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
            query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT WITH (FORMAT csv, NULL '\\N')").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.Identifier(schema, table)
            )
            with open(spool, "wb") as f:
                cur.copy_expert(query.as_string(conn), f, size=1 << 20)
        conn.rollback()
        # The snapshot is no longer needed: release the temporary slot now.
        repl.close()
        reader = pacsv.open_csv(
            spool,
            read_options=pacsv.ReadOptions(column_names=columns, block_size=COPY_BATCH_BYTES),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in columns},
                null_values=["\\N"],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in reader:
            yield pa.Table.from_batches([batch])
    finally:
        spool.unlink(missing_ok=True)
        conn.close()
        if not repl.closed:
            repl.close()
