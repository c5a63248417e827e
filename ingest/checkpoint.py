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

Derived views of the source's tables are built and kept in the same step (htap.ingest.views):
their deltas and truncations join the base deltas' metadata transaction.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass

import pyarrow as pa

from htap.connectors.changes import DECODE_ERRORS, ChangeStream
from htap.errors import PoisonError, TableError, WarehouseError
from htap.ingest.applier import Failure, TransactionApplier
from htap.ingest.failures import failure_message, log_failure
from htap.ingest.views import ViewKeeper
from htap.observe import CHECKPOINT_PHASE_SECONDS, CHECKPOINT_SECONDS, Phases, phase
from htap.replica.deltas import delete_delta_files, write_partitioned
from htap.replica.manifest import write_manifest
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo
from htap.replica.warehouse import Warehouse
from htap.seq import SeqCodec

log = logging.getLogger(__name__)


@dataclass
class Drained:
    """What one checkpoint makes durable, taken from the applier between transactions."""

    safe: int  # every commit up to it is in `parts` or was in an earlier checkpoint
    changes: int
    parts: list[tuple[TableInfo, pa.Table]]
    truncations: list[tuple[int, int]]
    failures: list[Failure]
    oldest_commit: float | None  # the source's commit time of the oldest transaction in it
    started: float  # time.perf_counter() when it was drained
    wall: float  # time.time() then
    phases: Phases


@dataclass
class Written:
    """A checkpoint whose metadata transaction committed: visible, not yet confirmed."""

    drained: Drained
    dropped: list[int]  # tables that failed while being written (the commit marked them failed)
    messages: list[tuple[int, str]]


class Checkpointer:
    """Checkpoints in three steps, so that the stream can go on while one is stored: `drain`
    (between transactions, on the stream's thread), `write` (on any thread: durable deltas, the
    metadata transaction that makes them visible, the manifest) and `finish` (on the stream's
    thread: the position is confirmed to the source). `checkpoint` does all three. One
    checkpoint of a source at a time: the next is drained only after the last one finished."""

    def __init__(self, warehouse: Warehouse, store: MetadataStore, source: str, codec: SeqCodec | None = None,
                 writer_store: MetadataStore | None = None):
        """`writer_store`: the store `write` uses (one per thread: a store is one connection)."""
        self.warehouse = warehouse
        self.store = store
        self.writer_store = writer_store or store
        self.source = source
        self.codec = codec
        self.views = ViewKeeper(warehouse, source)

    def checkpoint(self, applier: TransactionApplier, stream: ChangeStream, oldest_commit: float | None = None) -> int:
        """Make everything the applier holds durable (call between transactions); returns the
        new durable position. `oldest_commit`: the source's commit time (Unix seconds) of the
        oldest transaction buffered, for the log line saying how long it took to be visible."""
        return self.finish(self.write(self.drain(applier, oldest_commit)), applier, stream)

    def drain(self, applier: TransactionApplier, oldest_commit: float | None = None) -> Drained:
        started, wall = time.perf_counter(), time.time()
        safe, changes = applier.safe_seq, applier.buffered
        with Phases() as phases, phase("drain"):
            parts, truncations, failures = applier.drain()
        return Drained(safe, changes, parts, truncations, failures, oldest_commit, started, wall, phases)

    def write(self, drained: Drained) -> Written:
        with CHECKPOINT_SECONDS.labels(self.source).time(), drained.phases:
            # Each written partition's writer lock is held until the metadata commit (htap.replica.dv).
            with ExitStack() as locks:
                return self._write(drained, locks)

    def _write(self, drained: Drained, locks: ExitStack) -> Written:
        store, safe = self.writer_store, drained.safe
        failures, dropped = list(drained.failures), []
        deltas = []
        failed_ids = {f.table.id for f in failures}
        with phase("views_prepare"):
            changed = self.views.prepare(store)  # per base table with views: what its deltas change
        for table, data in drained.parts:
            if table.id in failed_ids:
                continue

            def live(part: int, table=table) -> dict[str, str | None]:
                # The partition's live deltas, and those this checkpoint already wrote for it.
                return {d.path: d.checksum for d in store.deltas(table.id, part)} | {
                    d.path: d.checksum for d in deltas if d.table_id == table.id and d.part == part}
            try:
                deltas += write_partitioned(self.warehouse, table, data, live, locks, store, changed.get(table.id),
                                            self.views.before_columns(table.id))
            except WarehouseError as e:
                # Before the metadata transaction: nothing of this checkpoint is visible or
                # confirmed. The caller restarts the stream from the durable position.
                raise type(e)(f"checkpoint of source {self.source} not stored, nothing confirmed to the"
                                     f" source (it re-sends from seq {store.source_position(self.source)}): {e}") from e
            except TableError as e:  # e.g. a key change's unchanged values that no version holds
                failures.append(Failure(table, e, safe))
                failed_ids.add(table.id)
                dropped.append(table.id)
            except DECODE_ERRORS as e:  # a value the delta's types cannot hold (never a disk error)
                failures.append(Failure(table, PoisonError(None, None, str(e).strip().splitlines()[0]), safe))
                failed_ids.add(table.id)
                dropped.append(table.id)
        # A table that failed contributes nothing to this checkpoint.
        unused = [d for d in deltas if d.table_id in failed_ids]
        deltas = [d for d in deltas if d.table_id not in failed_ids]
        truncations = [(t, s) for t, s in drained.truncations if t not in failed_ids]
        messages = [
            (f.table.id, failure_message(self.source, self.codec, f.table, f.error, f.seq, "the change stream"))
            for f in failures
        ]
        kept = self.views.write(store, changed, truncations, failed_ids, locks)  # in the same transaction
        deltas, truncations, messages = deltas + kept.deltas, truncations + kept.truncations, messages + kept.failures
        with phase("metadata_commit"):
            orphans = store.commit_checkpoint(self.source, deltas, safe, time.time(), truncations, messages)
        for path in orphans + [d.path for d in unused]:
            delete_delta_files(self.warehouse, path)
        # The manifest before the confirm: a source is never told a position newer than the one
        # a metadata store rebuilt from the warehouse would resume from (htap.replica.manifest).
        with phase("manifest"):
            write_manifest(self.warehouse, store, self.source)
        if deltas or truncations:
            log.info("checkpoint at seq %s: %d changes in %d deltas, %d truncations", safe, drained.changes, len(deltas),
                     len(truncations))
        return Written(drained, dropped, messages)

    def finish(self, written: Written, applier: TransactionApplier, stream: ChangeStream) -> int:
        """Confirm a written checkpoint (on the stream's thread); returns the durable position."""
        drained = written.drained
        for table_id in written.dropped:
            applier.drop(table_id)  # what it buffered since is discarded with it
        for _, message in written.messages:
            log_failure(message)
        with drained.phases, phase("confirm"):
            applier.checkpointed(drained.safe, {t.id: t for t in self.store.list_tables(self.source) if t.id in applier.tables})
            stream.confirm(drained.safe)  # only now is everything up to `safe` durable
        took = time.perf_counter() - drained.started
        for name, seconds in drained.phases.seconds.items():
            CHECKPOINT_PHASE_SECONDS.labels(self.source, name).observe(seconds)
        if drained.changes:
            # Parsed by bench.freshness (where a checkpoint's time goes): keep the shape.
            age = f"; oldest commit {drained.wall - drained.oldest_commit:.3f} s old at start" if drained.oldest_commit else ""
            log.info("checkpoint timing: %d changes in %.3f s (%s)%s", drained.changes, took, drained.phases.text(), age)
        return drained.safe
