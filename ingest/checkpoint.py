"""Checkpoints: buffered changes -> durable deltas -> one metadata transaction -> confirm.

The order is the durability contract of the whole service. Delta files are stored first (fsynced
in a local folder, or acknowledged by the object store: htap.replica.warehouse); then one
metadata transaction records them with the source's new max safe seq and position; only then is
the position confirmed to the source, which may then forget it. A crash at any point loses
nothing (the source re-sends what was not confirmed; re-sent transactions at or below the durable
position are skipped) and duplicates nothing (an unreferenced delta file is never read). An
object store that does not acknowledge an upload fails the checkpoint before its metadata
transaction: nothing is confirmed, and the changes stay buffered for the next attempt.

A table whose buffered values cannot be decoded or written fails alone: the same metadata
transaction marks it failed (with the value and seq named) and advances everyone else, so one
table never holds back its source.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from htap.connectors.changes import DECODE_ERRORS, ChangeStream
from htap.errors import PoisonError, WarehouseError
from htap.seq import SeqCodec
from htap.ingest.applier import Failure, TransactionApplier
from htap.ingest.failures import failure_message, log_failure
from htap.observe import CHECKPOINT_PHASE_SECONDS, CHECKPOINT_SECONDS, Phases, phase
from htap.replica.deltas import delete_delta_files, write_partitioned
from htap.replica.manifest import write_manifest
from htap.replica.metadata import MetadataStore
from htap.replica.warehouse import Warehouse

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, warehouse: Warehouse, store: MetadataStore, source: str, codec: SeqCodec | None = None):
        self.warehouse = warehouse
        self.store = store
        self.source = source
        self.codec = codec

    def checkpoint(self, applier: TransactionApplier, stream: ChangeStream, oldest_commit: float | None = None) -> int:
        """Make everything the applier holds durable (call between transactions); returns the
        new durable position. `oldest_commit`: the source's commit time (Unix seconds) of the
        oldest transaction buffered, for the log line saying how long it took to be visible."""
        started, wall = time.perf_counter(), time.time()
        with CHECKPOINT_SECONDS.labels(self.source).time(), Phases() as phases:
            changes = applier.buffered
            safe = self._checkpoint(applier, stream)
        took = time.perf_counter() - started
        for name, seconds in phases.seconds.items():
            CHECKPOINT_PHASE_SECONDS.labels(self.source, name).observe(seconds)
        if changes:
            # Parsed by bench.freshness (where a checkpoint's time goes): keep the shape.
            age = f"; oldest commit {wall - oldest_commit:.3f} s old at start" if oldest_commit else ""
            log.info("checkpoint timing: %d changes in %.3f s (%s)%s", changes, took, phases.text(), age)
        return safe

    def _checkpoint(self, applier: TransactionApplier, stream: ChangeStream) -> int:
        # Each written partition's writer lock is held until the metadata commit (htap.replica.dv).
        with ExitStack() as locks:
            return self._locked_checkpoint(applier, stream, locks)

    def _locked_checkpoint(self, applier: TransactionApplier, stream: ChangeStream, locks: ExitStack) -> int:
        safe = applier.safe_seq
        changes = applier.buffered
        with phase("drain"):
            parts, truncations, failures = applier.drain()
        deltas = []
        failed_ids = {f.table.id for f in failures}
        for table, data in parts:
            if table.id in failed_ids:
                continue

            def live(part: int, table=table) -> dict[str, str | None]:
                # The partition's live deltas, and those this checkpoint already wrote for it.
                return {d.path: d.checksum for d in self.store.deltas(table.id, part)} | {
                    d.path: d.checksum for d in deltas if d.table_id == table.id and d.part == part}
            try:
                deltas += write_partitioned(self.warehouse, table, data, live, locks, self.store)
            except WarehouseError as e:
                # Before the metadata transaction: nothing of this checkpoint is visible or
                # confirmed. The caller restarts the stream from the durable position.
                raise type(e)(f"checkpoint of source {self.source} not stored, nothing confirmed to the"
                                     f" source (it re-sends from seq {self.store.source_position(self.source)}): {e}") from e
            except DECODE_ERRORS as e:  # a value the delta's types cannot hold (never a disk error)
                failures.append(Failure(table, PoisonError(None, None, str(e).strip().splitlines()[0]), safe))
                failed_ids.add(table.id)
                applier.drop(table.id)
        # A table that failed contributes nothing to this checkpoint.
        dropped = [d for d in deltas if d.table_id in failed_ids]
        deltas = [d for d in deltas if d.table_id not in failed_ids]
        truncations = [(t, s) for t, s in truncations if t not in failed_ids]
        messages = [
            (f.table.id, failure_message(self.source, self.codec, f.table, f.error, f.seq, "the change stream"))
            for f in failures
        ]
        with phase("metadata_commit"):
            orphans = self.store.commit_checkpoint(self.source, deltas, safe, time.time(), truncations, messages)
        for path in orphans + [d.path for d in dropped]:
            delete_delta_files(self.warehouse, path)
        # The manifest before the confirm: a source is never told a position newer than the one
        # a metadata store rebuilt from the warehouse would resume from (htap.replica.manifest).
        with phase("manifest"):
            write_manifest(self.warehouse, self.store, self.source)
        for _, message in messages:
            log_failure(message)
        if deltas or truncations:
            log.info("checkpoint at seq %s: %d changes in %d deltas, %d truncations", safe, changes, len(deltas), len(truncations))
        with phase("confirm"):
            applier.checkpointed(safe, {t.id: t for t in self.store.list_tables(self.source) if t.id in applier.tables})
            stream.confirm(safe)  # only now is everything up to `safe` durable
        return safe
