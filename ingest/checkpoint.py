"""Checkpoints: buffered changes -> durable deltas -> one metadata transaction -> confirm.

The order is the durability contract of the whole service. Delta files are written and
fsynced first; then one metadata transaction records them with the source's new max safe seq
and position; only then is the position confirmed to the source, which may then forget it. A
crash at any point loses nothing (the source re-sends what was not confirmed; re-sent
transactions at or below the durable position are skipped) and duplicates nothing (an
unreferenced delta file is never read).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from htap.connectors.changes import ChangeStream
from htap.ingest.applier import TransactionApplier
from htap.replica.deltas import write_partitioned
from htap.replica.metadata import MetadataStore

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, warehouse: Path, store: MetadataStore, source: str):
        self.warehouse = warehouse
        self.store = store
        self.source = source

    def checkpoint(self, applier: TransactionApplier, stream: ChangeStream) -> int:
        """Make everything the applier holds durable (call between transactions); returns the
        new durable position."""
        safe = applier.safe_seq
        changes = applier.buffered
        parts, truncations = applier.drain()
        deltas = [d for table, data in parts for d in write_partitioned(self.warehouse, table, data)]
        self.store.commit_checkpoint(self.source, deltas, safe, time.time(), truncations)
        if deltas or truncations:
            log.info("checkpoint at seq %s: %d changes in %d deltas, %d truncations", safe, changes, len(deltas), len(truncations))
        applier.checkpointed(safe, {tid: self.store.table_by_id(tid) for tid in applier.tables})
        stream.confirm(safe)  # only now is everything up to `safe` durable
        return safe
