"""The ingest service: keeps every HTAP table of every configured source fresh.

Per source: check it, prepare it (publication and slot), copy any table that was added (or whose
copy was interrupted) at a consistent snapshot, then stream changes and checkpoint them. A
checkpoint writes one delta per changed table, commits the deltas together with the new max safe
seq in the metadata store, and only then confirms the position to the source. A crash loses
nothing: the stream resumes after the last durable checkpoint and any re-sent transaction at or
below it is skipped. Checkpoints happen only between transactions, so a reader never sees half
of one.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from htap import engine
from htap.conf import HtapConfig, SourceConfig
from htap.connectors.changes import DECODE_ERRORS, ChangeSource, Commit
from htap.connectors.registry import open_source
from htap.connectors.tables import keep_overrides
from htap.errors import HtapError, PoisonError, SourceError, TableError, WarehouseError
from htap.ingest.applier import Action, Failed, FollowSchema, Recopy, TransactionApplier
from htap.ingest.checkpoint import Checkpointer
from htap.ingest.failures import failure_message, log_failure
from htap.ingest.health import (
    PHASE_COPYING,
    PHASE_RECOVERING,
    PHASE_RETRYING,
    PHASE_STARTING,
    PHASE_STOPPED,
    PHASE_STREAMING,
    ServiceState,
    watch_sources,
)
from htap.ingest.stalls import StallWatch
from htap.ingest.tail import TAIL_PUBLISH_S, Tails
from htap.observe import COPY_SECONDS
from htap.replica import keyindex
from htap.replica.compaction import compaction_loop
from htap.replica.deltas import delete_delta_files, first_versions, partition_dir, write_delta
from htap.replica.manifest import write_manifest
from htap.replica.metadata import MetadataStore
from htap.replica.models import (
    OP,
    OP_UPSERT,
    SEQ,
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    STATE_PENDING,
    STATE_STREAMING,
    STATE_UNHEALTHY,
    TableInfo,
    encode_schema,
)
from htap.replica.partitions import choose_splits, encode_bounds, partition_count, partition_filter
from htap.replica.warehouse import open_warehouse

log = logging.getLogger(__name__)

PENDING_CHECK_S = 2.0
SCHEMA_CHECK_S = 5.0  # eager detection of changes the change stream does not show (column types)


class SourceIngest:
    """Copy and stream one source into the replica until `stop` is set."""

    def __init__(self, cfg: HtapConfig, source: SourceConfig, stop: threading.Event, state: ServiceState | None = None,
                 tails: Tails | None = None):
        """`tails`: where the stream publishes its in-memory tail (htap.ingest.tail), or None."""
        self.cfg = cfg
        self.tails = tails
        self.warehouse = open_warehouse(cfg)
        self.config = source
        self.source: ChangeSource = open_source(source)
        self.stop = stop
        self.store = MetadataStore(cfg.metadata)
        self.state = state if state is not None else ServiceState()

    def run(self) -> None:
        self.state.phase(self.config.name, PHASE_STARTING, "checking the source")
        self.source.check()
        self.protect_log()
        self.source.prepare()
        while not self.stop.is_set():
            self.sync_tables()
            self.stream()

    # --- source protection ----------------------------------------------------------------------

    def protect_log(self) -> None:
        """Never stream across a hole. When the source no longer holds log the replica needs
        (Postgres: the slot was invalidated by max_slot_wal_keep_size, or dropped), a new slot
        would silently skip every change since the durable position. Instead, the lost log is
        forgotten and every table it fed is copied again (after `prepare` made a new slot, so
        the copies' snapshots are followed by it); their reads fail over to the source until
        they stream again. Each step is idempotent: a crash in between repeats the detection."""
        name = self.config.name
        position = self.store.source_position(name)
        if position is None:  # never streamed: nothing can have been lost
            return
        retention = self.source.retention(position)
        if retention is None or not retention.lost:
            return
        self.state.phase(name, PHASE_RECOVERING, retention.lost)
        done = self.source.reset_log()  # a kind that cannot start a new log raises, saying what to do
        followed = (STATE_CATCHING_UP, STATE_STREAMING, STATE_UNHEALTHY)
        tables = [t for t in self.store.list_tables(name) if t.state in followed]
        for table in tables:
            self.store.resync(table.id, f"copying again: {retention.lost}")
        log.error(
            "source %s: %s; %s; copying %d table(s) again (%s); their reads go to the source until they stream again",
            name, retention.lost, done, len(tables), ", ".join(t.qualified_name for t in tables) or "none",
        )
        self.state.recovered(name)

    # --- initial copy -------------------------------------------------------------------------

    def sync_tables(self) -> None:
        for table in self.store.list_tables(self.config.name):
            if table.state in (STATE_PENDING, STATE_COPYING) and not self.stop.is_set():
                self.state.phase(self.config.name, PHASE_COPYING, f"copying {table.qualified_name}")
                self.copy(table)

    def copy(self, table: TableInfo) -> None:
        """Copy one table; a problem of the table itself (a value its replica types cannot hold,
        a column type without a replica type, the table gone) fails only that table, once: it
        is not retried until `htap tables recopy` or a change of its columns in the source. A
        problem of the source (connection lost) is raised: the whole source retries."""
        state: dict = {}
        try:
            with COPY_SECONDS.labels(self.config.name, table.qualified_name).time():
                self._copy(table, state)
        except (SourceError, WarehouseError):  # not the table's fault: the whole source retries
            raise
        except (TableError, *DECODE_ERRORS) as e:
            error = e if isinstance(e, HtapError) else PoisonError(None, None, str(e).strip().splitlines()[0])
            self.fail(state.get("table", table), error, state.get("copy_seq"), "the initial copy")
        except Exception as e:  # a bug, not bad input: say so loudly, but keep the source going
            log.exception("%s: unexpected failure of the initial copy", table.qualified_name)
            self.fail(state.get("table", table), HtapError(f"unexpected {type(e).__name__}: {e}"), state.get("copy_seq"),
                      "the initial copy")

    def fail(self, table: TableInfo, error: HtapError, seq: int | None, during: str) -> None:
        message = failure_message(self.config.name, self.config.codec, table, error, seq, during)
        self.store.fail_table(table.id, message)
        log_failure(message)

    def _copy(self, table: TableInfo, state: dict) -> None:
        """Initial copy: stage the source's rows, choose partition split points, write one
        sorted delta per partition, then make them visible with the copy seq in one step."""
        for stale in self.store.start_copy(table.id):
            delete_delta_files(self.warehouse, stale)
        # The source's schema now (it may have changed since the table was added); the replica
        # types chosen for its columns stay while their source types do.
        described, key = self.source.describe_table(table.schema, table.name)
        columns = keep_overrides(described, table.columns)
        self.store.redefine(table.id, columns, key, table.arrow_schema_b64)
        table = state["table"] = self.store.table_by_id(table.id)
        arrow = self.source.replica_schema(columns)  # TableError naming a column without a replica type
        self.store.redefine(table.id, columns, key, encode_schema(arrow))
        table = state["table"] = self.store.table_by_id(table.id)
        stage = self.warehouse.scratch() / f"copy-{table.id}-{uuid.uuid4().hex[:8]}"
        stage.mkdir(parents=True)
        try:
            copy_seq, chunks = self.source.initial_copy(table, stage)
            state["copy_seq"] = copy_seq
            log.info("copying %s at seq %s", table.qualified_name, copy_seq)
            rows, started = 0, time.monotonic()
            for i, chunk in enumerate(chunks):
                pq.write_table(chunk, stage / f"chunk-{i:06d}.parquet")
                rows += chunk.num_rows
                elapsed = max(time.monotonic() - started, 1e-6)
                log.info("copying %s: %d rows (%.0f rows/s)", table.qualified_name, rows, rows / elapsed)
            staged = ds.dataset(sorted(str(p) for p in stage.glob("chunk-*.parquet")), schema=table.arrow_schema)
            con = engine.cursor()
            con.register("staged", staged)
            splits = choose_splits(con, "staged", table.key[0], rows, self.cfg.partition_rows) if rows else None
            con.close()
            bounds = encode_bounds(splits) if splits is not None else None
            table = dataclasses.replace(table, partition_bounds_b64=bounds)
            deltas, written = [], []
            for part in range(partition_count(splits)):
                data = staged.to_table(filter=partition_filter(table.key[0], splits, part))
                if not data.num_rows:
                    continue
                data = data.sort_by([(k, "ascending") for k in table.key])
                data = data.append_column(SEQ, pa.array(np.full(data.num_rows, copy_seq, dtype=np.int64)))
                data = data.append_column(OP, pa.array(np.full(data.num_rows, OP_UPSERT, dtype=np.int8)))
                deltas.append(write_delta(self.warehouse, table, data, part, dv=first_versions(table)))
                written.append(data.select([*table.key, SEQ]))
            self.store.finish_copy(table.id, deltas, copy_seq, bounds)
            # Each partition's key index from the rows at hand, so the first checkpoint after the
            # copy need not build it from the files (1-2 s for 1M keys under load, holding up that
            # checkpoint and every commit behind it: htap.replica.keyindex).
            key_schema = pa.schema([table.arrow_schema.field(k) for k in table.key])
            for delta, keys in zip(deltas, written):
                keyindex.install(self.warehouse.lock_dir(partition_dir(table, delta.part)),
                                 keyindex.KeyIndex.of_delta(key_schema, delta.path, keys))
            write_manifest(self.warehouse, self.store, self.config.name)
            log.info(
                "copied %s: %d rows into %d partitions; catching up from seq %s",
                table.qualified_name, rows, partition_count(splits), copy_seq,
            )
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    # --- schema changes -------------------------------------------------------------------------

    def follow_schema(self, table: TableInfo, columns: tuple[str, ...]) -> TableInfo | None:
        """The source's rows for `table` now carry `columns`. Adding columns (that existing rows
        hold no value for) and dropping columns change only the logical schema; any other change
        has the table copied again. Returns the new table, or None when it is re-copied."""
        old = [c.name for c in table.columns]
        described, key = self.source.describe_table(table.schema, table.name)
        described = keep_overrides(described, table.columns)
        by_name = {c.name: c for c in described}
        kept = [c for c in columns if c in old]
        added = [c for c in columns if c not in old]
        dropped = [c for c in old if c not in columns]
        reason = None
        if [c.name for c in described] != list(columns):
            reason = "the source schema changed again since this change"
        elif kept != [c for c in old if c in columns] or tuple(key) != table.key or set(dropped) & set(table.key):
            reason = "columns were renamed, reordered or the key changed"
        elif kept + added != list(columns) or (added and dropped):
            # Added columns come last; one change that adds and drops columns may be a rename
            # (whose old rows do have values): only a copy is safe.
            reason = "columns were renamed or reordered"
        elif any(by_name[c.name].source_type != c.source_type for c in table.columns if c.name in by_name):
            reason = "a column's type changed"
        elif any(self.source.existing_rows_have_value(table.schema, table.name, c) for c in added):
            reason = "an added column gives existing rows a (default) value"
        elif any(d.partial_rows for d in self.store.deltas(table.id)):
            reason = "the table has partial rows recorded under the old column order"
        if reason is not None:
            log.warning("%s: schema change (%s): copying the table again", table.qualified_name, reason)
            self.store.resync(table.id, f"re-copying after a schema change: {reason}")
            return None
        version = table.schema_version + 1
        new_columns = [c for c in table.columns if c.name in columns] + [
            dataclasses.replace(by_name[c], added_version=version) for c in added
        ]
        try:
            arrow = self.source.replica_schema(new_columns)
        except TableError as e:
            log.warning("%s: schema change: %s: copying the table again", table.qualified_name, e)
            self.store.resync(table.id, f"re-copying after a schema change: {e}")
            return None
        self.store.alter_schema(table.id, new_columns, encode_schema(arrow), version)
        changed = self.store.table_by_id(table.id)
        log.info("%s: schema version %d: added %s, dropped %s (metadata only)", table.qualified_name, version, added, dropped)
        return changed

    def changed_types(self, tables: list[TableInfo], before_resync=lambda: None) -> list[int]:
        """Tables whose columns changed type in the source (same names): they are copied again.
        Added and dropped columns are followed when the stream shows them (follow_schema).
        A failed table is copied again on any change of its columns (names or types): the
        change may be the fix (e.g. a column given a type that holds the value). `before_resync`
        runs once, before the first table is marked to be copied again."""
        changed = []
        for table in tables:
            try:
                described, _ = self.source.describe_table(table.schema, table.name)
            except HtapError as e:
                if table.state != STATE_FAILED:
                    log.warning("%s: cannot check its schema: %s", table.qualified_name, e)
                continue
            now = {c.name: c.source_type for c in described}
            before = {c.name: c.source_type for c in table.columns}
            if table.state == STATE_FAILED:
                if list(now.items()) != list(before.items()):
                    if not changed:
                        before_resync()
                    log.warning("%s (failed): its columns changed in the source: copying the table again", table.qualified_name)
                    self.store.resync(table.id, "re-copying a failed table after its columns changed in the source")
                    changed.append(table.id)
            elif set(now) == set(before) and now != before:
                if not changed:
                    before_resync()
                log.warning("%s: a column changed type in the source: copying the table again", table.qualified_name)
                self.store.resync(table.id, "re-copying after a column type change")
                changed.append(table.id)
        return changed

    # --- streaming ----------------------------------------------------------------------------

    def stream(self) -> None:
        """Stream and checkpoint until stopped or until a table needs its initial copy.

        The scheduler: it polls the stream, hands events to the applier, performs the
        applier's actions, and checkpoints on time or size between transactions. A checkpoint
        is drained here and stored on a writer thread while the stream goes on (decoding what
        arrives meanwhile into the next one): its changes become visible when its metadata
        transaction commits there, and its position is confirmed here after that. One at a
        time: the next is drained once the last one finished, `flush_interval_s` after the last
        one started (or at once, if storing it took longer)."""
        tables = [t for t in self.store.list_tables(self.config.name) if t.state in (STATE_CATCHING_UP, STATE_STREAMING)]
        position = self.store.source_position(self.config.name) or 0
        applier = TransactionApplier(tables, self.source.decode_column, position)
        writer_store = MetadataStore(self.cfg.metadata)
        checkpointer = Checkpointer(self.warehouse, self.store, self.config.name, self.config.codec, writer_store)
        writer = ThreadPoolExecutor(1, thread_name_prefix=f"checkpoint-{self.config.name}")
        tail = self.tails.store(self.config.name) if self.tails is not None else None
        if tail is not None:
            tail.restart(position)
        log.info("streaming %s from seq %s (%d tables)", self.config.name, position, len(tables))

        interval = self.cfg.flush_interval_s
        next_flush = time.monotonic() + interval
        next_pending_check = time.monotonic() + PENDING_CHECK_S
        next_schema_check = time.monotonic() + SCHEMA_CHECK_S
        oldest: float | None = None  # commit time of the oldest transaction buffered
        in_flight: Future | None = None  # the checkpoint being written
        published = 0.0  # when the tail was last published
        watch = StallWatch(self.config.name)  # logs where the time went when the stream falls behind
        self.state.watches[self.config.name] = watch  # its commits' arrival delay is a metric

        def publish() -> None:
            """Hand what was applied since the last publish to the in-memory tail (between
            transactions; nothing while the tail holds its limit of memory: the rows stay
            buffered and the next checkpoint makes them readable)."""
            nonlocal published
            published = time.monotonic()
            if tail is not None and not tail.full():
                parts, ok = applier.publish()
                tail.publish(applier.safe_seq, parts, ok, set(applier.tables))

        def settle(wait: bool = True) -> None:
            """Confirm the checkpoint being written once it is (its error is raised here)."""
            nonlocal in_flight
            if in_flight is None or not (wait or in_flight.done()):
                return
            done, in_flight = in_flight, None
            safe = checkpointer.finish(done.result(), applier, stream)
            if tail is not None:
                tail.checkpointed(safe)

        def start() -> None:
            """Drain a checkpoint (between transactions) and have it written."""
            nonlocal in_flight, oldest, next_flush
            settle()
            publish()  # the tail's segments end where checkpoints do
            next_flush = time.monotonic() + interval
            drained = checkpointer.drain(applier, oldest)
            oldest = None
            in_flight = writer.submit(checkpointer.write, drained)

        def checkpoint() -> None:
            start()
            settle()

        try:
            with self.source.stream(position, tables) as stream:
                self.state.phase(self.config.name, PHASE_STREAMING, f"streaming {len(tables)} table(s)")
                while True:
                    watch.end()
                    watch.begin()
                    settle(wait=False)
                    watch.mark("confirm")
                    now = time.monotonic()
                    if not applier.in_txn:
                        if self.stop.is_set():
                            checkpoint()
                            return
                        if in_flight is None and (now >= next_flush or (tail is not None and tail.over_limit())):
                            start()
                            stream.request_progress()
                            watch.mark("drain")
                        if now >= next_schema_check:
                            next_schema_check = now + SCHEMA_CHECK_S
                            failed = [t for t in self.store.list_tables(self.config.name) if t.state == STATE_FAILED]
                            # settle: a table copied again is not written meanwhile (only then: waiting for
                            # the checkpoint in flight every few seconds stalled the stream, and the tail)
                            for tid in self.changed_types(list(applier.tables.values()) + failed, before_resync=settle):
                                applier.drop(tid)
                        if now >= next_pending_check:
                            next_pending_check = now + PENDING_CHECK_S
                            stored = self.store.list_tables(self.config.name)
                            if any(t.state == STATE_PENDING for t in stored):
                                checkpoint()
                                return
                            followed = {t.id for t in stored if t.state in (STATE_CATCHING_UP, STATE_STREAMING)}
                            for tid in [tid for tid in applier.tables if tid not in followed]:
                                applier.drop(tid)  # removed (`htap tables remove`) or failed elsewhere
                        watch.mark("checks")
                    if applier.in_txn:
                        timeout = 1.0
                    elif in_flight is not None:
                        timeout = 0.005  # confirm it soon after it is written, and start the next
                    else:
                        timeout = max(0.0, min(next_flush, next_pending_check) - now)
                    if tail is not None and not applier.in_txn and applier.safe_seq > tail.visible:
                        if now >= published + TAIL_PUBLISH_S:
                            publish()
                            watch.mark("publish")
                        timeout = min(timeout, max(0.0, published + TAIL_PUBLISH_S - now))
                    event = stream.poll(timeout)
                    watch.mark("poll")
                    if event is None:
                        continue
                    action = applier.apply(event)
                    watch.mark("apply")
                    if action is not None:
                        settle()  # actions change tables: never while one is being written
                        self.perform(applier, action)
                        watch.mark("action")
                    if isinstance(event, Commit):
                        watch.arrived(event.seq, event.commit_time)
                        if oldest is None and applier.buffered:
                            oldest = event.commit_time
                    if isinstance(event, Commit) and applier.buffered >= self.cfg.flush_max_changes:
                        start()
                        watch.mark("drain")
                    elif tail is not None and not applier.in_txn and time.monotonic() >= published + TAIL_PUBLISH_S:
                        publish()
                        watch.mark("publish")
        finally:
            # Never leave a checkpoint being written behind: the next stream starts from the
            # position the store holds once it is.
            writer.shutdown(wait=True)
            writer_store.close()

    def perform(self, applier: TransactionApplier, action: Action) -> None:
        """Carry out what the applier could not decide alone."""
        table = applier.tables[action.table_id]
        if isinstance(action, FollowSchema):
            try:
                changed = self.follow_schema(table, action.columns)
            except TableError as e:  # e.g. the table is gone from the source
                applier.fail(table.id, e, applier.txn_seq)
                return
            if changed is None:
                applier.drop(table.id)
            else:
                applier.retable(changed)
        elif isinstance(action, Recopy):
            log.warning("%s: %s: copying the table again", table.qualified_name, action.reason)
            self.store.resync(table.id, action.reason)
            applier.drop(table.id)
        elif isinstance(action, Failed):
            applier.fail(table.id, action.error, action.seq)  # recorded with the next checkpoint


def heartbeat_loop(cfg: HtapConfig, stop: threading.Event, tails: Tails | None = None) -> None:
    """Tell the metadata store that this service runs (`htap status`), every SERVICE_BEAT_S;
    gone when it stops cleanly, old when it was killed. With `tails`, where queries read its
    in-memory tail (and the secret they need, unless the config gives it: service.tail_secret)."""
    import os
    import socket

    from htap.replica.metadata import SERVICE_BEAT_S

    service_id = f"{socket.gethostname()}:{os.getpid()}"
    info = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": time.time(), "sources": sorted(cfg.sources)}
    if tails is not None and tails.endpoint:
        info["tail"] = {"endpoint": tails.endpoint, **({} if cfg.service.tail_secret else {"secret": tails.secret})}
    store = MetadataStore(cfg.metadata)
    try:
        while True:
            try:
                store.beat_service(service_id, info)
            except Exception as e:  # noqa: BLE001 - the store is busy or away: said, and the next beat tries again
                log.warning("cannot record the service's heartbeat (htap status may call it stopped): %s: %s",
                            type(e).__name__, e)
            if stop.wait(SERVICE_BEAT_S):
                break
        store.end_service(service_id)
    finally:
        store.close()


def serve(cfg: HtapConfig, stop: threading.Event, retry_s: float = 5.0, state: ServiceState | None = None) -> None:
    """Run the ingest of every configured source until `stop`; retry a source that fails.
    `state` records what each source's ingest is doing (for the health endpoint)."""
    state = state if state is not None else ServiceState()
    tails = None
    if cfg.service.tail_address:
        tails = Tails(cfg.service.tail_bytes, **({"secret": cfg.service.tail_secret} if cfg.service.tail_secret else {}))
        tails.serve(cfg.service.tail_address)
        state.tails = tails

    def run_source(source: SourceConfig) -> None:
        while not stop.is_set():
            try:
                SourceIngest(cfg, source, stop, state, tails).run()
            except HtapError as e:
                text = str(e) if f"source {source.name}" in str(e) else f"source {source.name}: {e}"
                state.phase(source.name, PHASE_RETRYING, text)
                log.error("%s (retrying in %.0f s)", text, retry_s)
                stop.wait(retry_s)
            except Exception as e:  # a bug, not bad input: say so loudly, keep the other sources running
                state.phase(source.name, PHASE_RETRYING, f"unexpected {type(e).__name__}: {e}")
                log.exception("source %s: unexpected failure (retrying in %.0f s)", source.name, retry_s)
                stop.wait(retry_s)
        state.phase(source.name, PHASE_STOPPED, "the service is stopping")

    threads = [threading.Thread(target=run_source, args=(s,), name=f"ingest-{s.name}") for s in cfg.sources.values()]
    threads.append(threading.Thread(target=compaction_loop, args=(cfg, stop), name="compaction"))
    threads.append(threading.Thread(target=watch_sources, args=(cfg, state, stop), name="source-watch"))
    threads.append(threading.Thread(target=heartbeat_loop, args=(cfg, stop, tails), name="heartbeat"))
    indexes = keyindex.persist_in_background(stop)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    indexes.join()
    if tails is not None:
        tails.shutdown()
    # Every partition's key index as the last checkpoints and compactions left it, so that the
    # next start reads them instead of building them from the deltas (htap.replica.keyindex_file).
    stored = keyindex.flush()
    if stored:
        log.info("stored the key indexes of %d partitions", stored)
