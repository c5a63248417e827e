"""The ingest service: keeps every HTAP table of a Postgres source fresh.

Per source: check the server, make sure the publication and slot exist, copy any table that
was added (or whose copy was interrupted) at a consistent snapshot, then stream changes and
checkpoint them. A checkpoint writes one delta per changed table, commits the deltas together
with the new max safe seq in the metadata store, and only then confirms the position to the
source. A crash loses nothing: the stream resumes after the last durable checkpoint and any
re-sent transaction at or below it is skipped.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time

import pyarrow as pa
import psycopg2

from htap.conf import HtapConfig, SourceConfig
from htap.connectors import pgoutput
from htap.connectors.postgres import (
    check_cdc_ready,
    connect,
    copy_table,
    ensure_publication,
    ensure_slot,
    int_to_lsn,
    publish_table,
)
from htap.errors import HtapError, SourceError
from htap.replica.buffer import PartialRowUnsupported, SchemaChanged, TableBuffer, typed_columns
from htap.replica.deltas import ORD, write_delta
from htap.replica.metadata import MetadataStore
from htap.replica.models import (
    OP,
    OP_UPSERT,
    SEQ,
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_PENDING,
    STATE_STREAMING,
    STATE_UNHEALTHY,
    TableInfo,
)

log = logging.getLogger(__name__)

PENDING_CHECK_S = 2.0


class PostgresIngest:
    """Copy and stream one Postgres source into the replica until `stop` is set."""

    def __init__(self, cfg: HtapConfig, source: SourceConfig, stop: threading.Event):
        self.cfg = cfg
        self.source = source
        self.stop = stop
        self.store = MetadataStore(cfg.metadata)

    def run(self) -> None:
        conn = connect(self.source.dsn)
        try:
            check_cdc_ready(conn)
            ensure_publication(conn, self.source.publication)
        finally:
            conn.close()
        ensure_slot(self.source.dsn, self.source.slot)
        while not self.stop.is_set():
            self.sync_tables()
            self.stream()

    # --- initial copy -------------------------------------------------------------------------

    def sync_tables(self) -> None:
        for table in self.store.list_tables(self.source.name):
            if table.state in (STATE_PENDING, STATE_COPYING) and not self.stop.is_set():
                self.copy(table)

    def copy(self, table: TableInfo) -> None:
        for stale in self.store.start_copy(table.id):
            (self.cfg.warehouse / stale).unlink(missing_ok=True)
        conn = connect(self.source.dsn)
        try:
            publish_table(conn, self.source.publication, table.schema, table.name)
        finally:
            conn.close()
        names = [c.name for c in table.columns]
        copy_seq, chunks = copy_table(
            self.source.dsn,
            table.schema,
            table.name,
            names,
            self.cfg.warehouse / "_tmp",
            slot_name=f"htap_copy_{table.id}_{os.getpid()}",
        )
        log.info("copying %s at seq %s", table.qualified_name, int_to_lsn(copy_seq))
        deltas, rows, started = [], 0, time.monotonic()
        for chunk in chunks:
            n = chunk.num_rows
            arrays = typed_columns(chunk.columns, table.arrow_schema)
            arrays += [
                pa.array([copy_seq] * n, pa.int64()),
                pa.array([OP_UPSERT] * n, pa.int8()),
                pa.array(range(n), pa.int64()),
            ]
            data = pa.Table.from_arrays(arrays, names=[*names, SEQ, OP, ORD])
            deltas.append(write_delta(self.cfg.warehouse, table, data))
            rows += n
            log.info("copying %s: %d rows (%.0f rows/s)", table.qualified_name, rows, rows / max(time.monotonic() - started, 1e-6))
        self.store.finish_copy(table.id, deltas, copy_seq)
        log.info("copied %s: %d rows in %d deltas; catching up from %s", table.qualified_name, rows, len(deltas), int_to_lsn(copy_seq))

    # --- streaming ----------------------------------------------------------------------------

    def stream(self) -> None:
        """Stream and checkpoint until stopped or until a table needs its initial copy."""
        tables = {t.id: t for t in self.store.list_tables(self.source.name) if t.state in (STATE_CATCHING_UP, STATE_STREAMING)}
        by_name = {(t.schema, t.name): t.id for t in tables.values()}
        buffers = {tid: TableBuffer(t) for tid, t in tables.items()}
        position = self.store.source_position(self.source.name) or 0
        relations: dict[int, int | None] = {}

        repl = connect(self.source.dsn, replication=True)
        cur = repl.cursor()
        try:
            cur.start_replication(
                slot_name=self.source.slot,
                decode=False,
                options={"proto_version": "1", "publication_names": self.source.publication},
            )
        except psycopg2.Error as e:
            repl.close()
            raise SourceError(f"cannot start streaming from slot {self.source.slot}: {e}") from e
        log.info("streaming %s from %s (%d tables)", self.source.name, int_to_lsn(position), len(tables))

        in_txn = skip_txn = False
        txn_seq = last_commit = position
        buffered = 0
        interval = self.cfg.flush_interval_s
        next_flush = time.monotonic() + interval
        next_pending_check = time.monotonic() + PENDING_CHECK_S

        def unhealthy(tid: int, error: HtapError) -> None:
            log.error("%s", error)
            self.store.set_state(tid, STATE_UNHEALTHY, str(error))
            buffers.pop(tid, None)
            tables.pop(tid, None)

        def checkpoint(idle: bool) -> None:
            nonlocal position, buffered, next_flush
            safe = max(position, last_commit)
            if idle and not in_txn and cur.wal_end:
                # Every commit before the server's sent position has reached us.
                safe = max(safe, cur.wal_end - 1)
            deltas = [write_delta(self.cfg.warehouse, buf.table, buf.drain()) for buf in buffers.values() if len(buf)]
            if deltas or safe > position or idle:
                self.store.commit_checkpoint(self.source.name, deltas, safe, time.time())
                if deltas:
                    log.info("checkpoint at %s: %d changes in %d deltas", int_to_lsn(safe), buffered, len(deltas))
                position = safe
                for tid in list(tables):
                    tables[tid] = self.store.table_by_id(tid)
            buffered = 0
            next_flush = time.monotonic() + interval
            # Only now is everything up to `position` durable: let the source recycle its WAL.
            cur.send_feedback(flush_lsn=position + 1, reply=idle)

        try:
            while True:
                msg = cur.read_message()
                now = time.monotonic()
                if msg is None:
                    if not in_txn and (now >= next_flush or self.stop.is_set()):
                        checkpoint(idle=True)
                    if self.stop.is_set():
                        return
                    if now >= next_pending_check and not in_txn:
                        next_pending_check = now + PENDING_CHECK_S
                        if any(t.state == STATE_PENDING for t in self.store.list_tables(self.source.name)):
                            checkpoint(idle=False)
                            return
                    select.select([repl], [], [], max(0.0, min(next_flush, next_pending_check) - now))
                    continue
                m = pgoutput.decode(msg.payload)
                if isinstance(m, pgoutput.Begin):
                    in_txn, txn_seq = True, m.commit_lsn
                    skip_txn = txn_seq <= position
                elif isinstance(m, pgoutput.Commit):
                    in_txn = False
                    last_commit = max(last_commit, m.commit_lsn)
                    if buffered >= self.cfg.flush_max_changes or now >= next_flush:
                        checkpoint(idle=False)
                elif isinstance(m, pgoutput.Relation):
                    tid = by_name.get((m.schema, m.name))
                    relations[m.relid] = tid
                    if tid in buffers:
                        try:
                            buffers[tid].set_relation(m.columns)
                        except SchemaChanged as e:
                            unhealthy(tid, e)
                elif isinstance(m, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
                    tid = relations.get(m.relid)
                    if skip_txn or tid not in buffers or txn_seq <= (tables[tid].copy_seq or 0):
                        continue
                    buf = buffers[tid]
                    try:
                        if isinstance(m, pgoutput.Delete):
                            buf.delete(m.old, txn_seq)
                        elif isinstance(m, pgoutput.Insert):
                            buf.upsert(m.new, txn_seq)
                        else:
                            if m.old is not None and buf.key_of(m.old) != buf.key_of(m.new):
                                buf.delete(m.old, txn_seq)  # the key itself changed
                            buf.upsert(m.new, txn_seq)
                    except PartialRowUnsupported as e:
                        unhealthy(tid, e)
                        continue
                    buffered += 1
                elif isinstance(m, pgoutput.Truncate):
                    for relid in m.relids:
                        tid = relations.get(relid)
                        if tid in buffers and not skip_txn and txn_seq > (tables[tid].copy_seq or 0):
                            unhealthy(tid, SourceError(f"{tables[tid].qualified_name} was truncated in the source; "
                                                       "TRUNCATE is not replicated yet: re-add the table"))
        except psycopg2.Error as e:
            raise SourceError(f"replication stream of source {self.source.name} failed: {e}") from e
        finally:
            repl.close()


def serve(cfg: HtapConfig, stop: threading.Event, retry_s: float = 5.0) -> None:
    """Run the ingest of every configured source until `stop`; retry a source that fails."""

    def run_source(source: SourceConfig) -> None:
        while not stop.is_set():
            try:
                PostgresIngest(cfg, source, stop).run()
            except HtapError as e:
                log.error("source %s: %s (retrying in %.0f s)", source.name, e, retry_s)
                stop.wait(retry_s)

    threads = [threading.Thread(target=run_source, args=(s,), name=f"ingest-{s.name}") for s in cfg.sources.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
