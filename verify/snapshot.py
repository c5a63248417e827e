"""One snapshot shared by the source and the replica, exactly (Postgres).

A replication connection creates a temporary logical slot that exports its snapshot:
`CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')` returns a
consistent point C and a snapshot name. A transaction that runs `SET TRANSACTION SNAPSHOT` on
that name sees exactly the commits before C, which is the replica's state at seq C-1 (seq =
commit LSN; the initial copy relies on the same fact). The exported snapshot lives only while
the replication connection stays open and idle, so `ExportedSnapshot` holds it open until
closed. Once every table's max safe seq has reached C-1, comparing the two sides is exact,
however many writes commit meanwhile.
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg2

from htap.conf import SourceConfig
from htap.connectors.postgres import connect
from htap.errors import HtapError, SourceError
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo
from htap.seq import int_to_lsn, lsn_to_int


class VerifyError(HtapError):
    """Verification could not run (no exact snapshot, replica not caught up, unsupported source)."""


class ExportedSnapshot:
    """An exported source snapshot and the replica seq that equals it; a context manager."""

    def __init__(self, source: SourceConfig):
        if source.kind != "postgres":
            raise VerifyError(
                f"source {source.name} is a {source.kind} source: exact snapshot verification is built for "
                f"Postgres sources only"
            )
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

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()

    def __enter__(self) -> "ExportedSnapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def to_dict(self) -> dict:
        return {"seq": self.seq, "seq_lsn": int_to_lsn(self.seq), "consistent_point": self.lsn, "source_snapshot": self.name}

    def open_transaction(self):
        """A source connection in a read-only transaction at this snapshot (the caller closes it)."""
        conn = connect(self.source.dsn)
        try:
            conn.autocommit = False
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (self.name,))
        except psycopg2.Error as e:
            conn.close()
            raise SourceError(f"cannot import snapshot {self.name} on source {self.source.name}: {e}") from e
        return conn


def wait_for_seq(store: MetadataStore, table: TableInfo, seq: int, timeout_s: float) -> TableInfo:
    """Wait until the replica of `table` is durable up to `seq`; the table's fresh info."""
    deadline = time.monotonic() + timeout_s
    while True:
        t = store.table_by_id(table.id)
        if t.readable and t.max_safe_seq >= seq:
            return t
        if time.monotonic() > deadline:
            where = "not readable" if not t.readable else f"at seq {t.max_safe_seq} ({int_to_lsn(t.max_safe_seq)})"
            raise VerifyError(
                f"{t.qualified_name}: the replica has not reached seq {seq} ({int_to_lsn(seq)}) after {timeout_s:g} s"
                f" (state {t.state}, {where}{'; ' + t.error if t.error else ''}); is `htap serve` running?"
            )
        time.sleep(0.05)
