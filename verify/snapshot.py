"""One snapshot shared by the source and the replica, exactly.

The source exports a snapshot that equals the replica's state at one seq S (Postgres: a
temporary slot's exported snapshot; MySQL/MariaDB: a consistent snapshot and its binlog
position; see each connector). Once every table's max safe seq has reached S, comparing the
two sides is exact, however many writes commit meanwhile.
"""

from __future__ import annotations

import time

from htap.conf import SourceConfig
from htap.connectors.queryable import SourceSnapshot
from htap.connectors.registry import open_queryable
from htap.errors import HtapError
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo


class VerifyError(HtapError):
    """Verification could not run (no exact snapshot, replica not caught up, unsupported source)."""


def ExportedSnapshot(source: SourceConfig) -> SourceSnapshot:  # noqa: N802 (was a class; callers use it as one)
    """An exported snapshot of the source's database and the replica seq that equals it; a
    context manager."""
    return open_queryable(source).export_snapshot()


def wait_for_seq(store: MetadataStore, table: TableInfo, seq: int, timeout_s: float) -> TableInfo:
    """Wait until the replica of `table` is durable up to `seq`; the table's fresh info."""
    deadline = time.monotonic() + timeout_s
    while True:
        t = store.table_by_id(table.id)
        if t.readable and t.max_safe_seq >= seq:
            return t
        if time.monotonic() > deadline:
            where = "not readable" if not t.readable else f"at seq {t.max_safe_seq}"
            raise VerifyError(
                f"{t.qualified_name}: the replica has not reached seq {seq} after {timeout_s:g} s"
                f" (state {t.state}, {where}{'; ' + t.error if t.error else ''}); is `htap serve` running?"
            )
        time.sleep(0.05)
