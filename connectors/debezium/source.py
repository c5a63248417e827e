"""The Debezium change source: describe, initial copy (a replay of the events), the stream."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from htap.conf import SourceConfig
from htap.connectors.changes import (
    UNSET,
    Begin,
    ChangeSource,
    ChangeStream,
    Commit,
    Event,
    Relation,
    RowChange,
    Truncate,
    decode_checked,
    python_values,
)
from htap.connectors.debezium.assembler import Assembler
from htap.connectors.debezium.connect_types import arrow_type, type_string
from htap.connectors.debezium.envelope import Record, source_table, unwrap
from htap.connectors.debezium.positions import change_position
from htap.connectors.debezium.transport import (
    FileTransport,
    KafkaTransport,
    iter_file_records,
    kafka_consumer,
    kafka_topics,
    newest_file_records,
)
from htap.connectors.tables import Column, SourceTable
from htap.errors import NoSuchTableError, SourceError, TableError

log = logging.getLogger(__name__)
GROUP_IDLE_S = 1.0  # Kafka without transaction metadata: an open transaction ends after this much quiet
DESCRIBE_TIMEOUT_S = 15.0


class DebeziumStream(ChangeStream):
    def __init__(self, cfg: SourceConfig, from_seq: int, tables: list[SourceTable]):
        self.cfg = cfg
        self.kafka = bool(cfg.bootstrap_servers)
        keys = [(t.schema, t.name) for t in tables]
        self.transport = KafkaTransport(cfg, keys) if self.kafka else FileTransport(cfg.path)
        self.assembler = Assembler(tables, from_seq, cfg.unavailable_value_placeholder, on_emit=self._tag)
        self.quiet = False

    @staticmethod
    def _tag(seq: int, refs: list) -> None:
        for ref in refs:
            if ref is not None:
                ref[1] = seq

    def poll(self, timeout: float) -> Event | None:
        deadline = time.monotonic() + timeout
        a = self.assembler
        while True:
            if a.out:
                return a.out.popleft()
            records = self.transport.read()
            for rec in records:
                a.feed(rec)
            # Records done on their own (tombstones, markers of nothing) count as of the last emitted seq.
            if a.loose_refs:
                self._tag(a.last_seq, a.loose_refs)
                a.loose_refs = []
            if records:
                self.quiet = False
                continue
            if not self.quiet and (not self.kafka or time.monotonic() - a.last_input >= GROUP_IDLE_S):
                a.flush()  # the end of the file (for now), or a quiet topic
                self.quiet = True
                continue
            if a.out:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, 0.05 if self.kafka else 0.2))

    def confirm(self, seq: int) -> None:
        if self.kafka:
            self.transport.commit(seq)

    def close(self) -> None:
        self.transport.close()


class DebeziumSource(ChangeSource):

    def __init__(self, config: SourceConfig):
        self.config = config

    def _records(self, tables: list[tuple[str, str]]) -> Iterator[Record]:
        cfg = self.config
        if not cfg.bootstrap_servers:
            yield from iter_file_records(cfg.path)
            return
        consumer = kafka_consumer(cfg, kafka_topics(cfg, tables), group=False)
        try:
            deadline, quiet = time.monotonic() + DESCRIBE_TIMEOUT_S, 0
            while time.monotonic() < deadline and quiet < 3:
                polled = consumer.poll(timeout_ms=1000)
                quiet = 0 if polled else quiet + 1
                for tp_records in polled.values():
                    for r in tp_records:
                        yield Record(r.topic, r.key, r.value)
        finally:
            consumer.close(autocommit=False)

    def check(self) -> None:
        cfg = self.config
        if cfg.bootstrap_servers:
            consumer = kafka_consumer(cfg, [], group=False)
            try:
                consumer.topics()
            except Exception as e:  # noqa: BLE001
                raise SourceError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {e}") from e
            finally:
                consumer.close(autocommit=False)
            return
        path = Path(cfg.path)
        if not path.exists():
            raise SourceError(f"no Debezium events at {path}: point sources.{cfg.name}.path at a JSON-lines file or a folder of them")

    def describe_table(self, schema: str, table: str) -> tuple[list[Column], list[str]]:
        seen = False
        columns: list[Column] | None = None
        key: list[str] | None = None
        for rec in self._records([(schema, table)]):
            _s, value = unwrap(rec.value)
            if not isinstance(value, dict):
                continue
            if "tableChanges" in value:
                for change in value.get("tableChanges") or []:
                    if Assembler._change_table(change, value) == (schema, table):
                        seen = True
                        key = key or list((change.get("table") or {}).get("primaryKeyColumnNames") or []) or None
                continue
            if "op" not in value or source_table(value.get("source") or {}) != (schema, table):
                continue
            seen = True
            if key is None and rec.key is not None:
                kschema, kvalue = unwrap(rec.key)
                if kschema and kschema.get("fields"):
                    key = [f["field"] for f in kschema["fields"]]
                elif isinstance(kvalue, dict) and kvalue:
                    key = list(kvalue)
            if columns is None and _s:
                for f in _s.get("fields", []):
                    if f.get("field") in ("after", "before") and f.get("fields"):
                        columns = [
                            Column(x["field"], type_string(x), bool(x.get("optional", True))) for x in f["fields"]
                        ]
                        break
            if columns is not None and key is not None:
                break
        where = self.config.path or f"Kafka topics of prefix {self.config.topic_prefix!r}"
        if not seen:
            raise NoSuchTableError(
                f"no Debezium events for {schema}.{table} in {where}; check the name (<schema or database>.<table> "
                f"as in the events' source block)"
            )
        if columns is None:
            raise TableError(
                f"the Debezium events for {schema}.{table} carry no schema: set value.converter.schemas.enable=true "
                f"on the connector's JSON converter (at least until the table is added)"
            )
        if not key:
            raise TableError(
                f"no primary key known for {schema}.{table}: the events carry no record key (store records as "
                f'{{"topic": ..., "key": ..., "value": ...}} lines, or read them from Kafka)'
            )
        missing = [k for k in key if k not in {c.name for c in columns}]
        if missing:
            raise TableError(f"{schema}.{table}: key columns {missing} are not among the event's columns")
        for c in columns:
            arrow_type(c.source_type)  # raises for an unsupported type, naming it
        return columns, key

    def arrow_type(self, source_type: str) -> pa.DataType:
        return arrow_type(source_type)

    def prepare(self) -> None:
        """Nothing to create: Debezium owns the slot or binlog position."""

    def _records_to_end(self, tables: list[tuple[str, str]], newest: int | None = None) -> Iterator[Record]:
        """Every record there is now: the whole file or folder, or the topics up to their end
        offsets; with `newest`, only (at least) the last `newest` records of each partition, or
        the end of the input's last file."""
        cfg = self.config
        if not cfg.bootstrap_servers:
            yield from (iter_file_records(cfg.path) if newest is None else newest_file_records(cfg.path))
            return
        from kafka import TopicPartition

        consumer = kafka_consumer(cfg, [], group=False)
        try:
            parts = [TopicPartition(t, p) for t in kafka_topics(cfg, tables) for p in sorted(consumer.partitions_for_topic(t) or ())]
            if not parts:
                return
            consumer.assign(parts)
            if newest is None:
                consumer.seek_to_beginning(*parts)
            else:
                first, last = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
                for tp in parts:
                    consumer.seek(tp, max(first.get(tp, 0), last.get(tp, 0) - newest))
            # Every record polled counts, also past the end offset asked for: a partition's
            # records are a prefix of it whatever the cut (transactions complete or not), and a
            # broker may answer an end offset below its last record (Tansu: the last batch's
            # base offset), so records past it would otherwise be read and dropped.
            end = consumer.end_offsets(parts)
            remaining = {tp for tp in parts if end.get(tp, 0) > 0}
            stalled = time.monotonic() + 60
            while remaining:
                polled = consumer.poll(timeout_ms=1000)
                for tp, records in polled.items():
                    for r in records:
                        yield Record(r.topic, r.key, r.value)
                for tp in list(remaining):
                    if consumer.position(tp) >= end[tp]:
                        remaining.discard(tp)
                if polled:
                    stalled = time.monotonic() + 60
                elif time.monotonic() > stalled:
                    raise SourceError(f"Kafka at {cfg.bootstrap_servers} stopped delivering before the end of {sorted(str(t) for t in remaining)}")
            # One poll more: an end offset answered below the last batch (Tansu) is reached before
            # that batch is fetched when it comes in a fetch of its own.
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    yield Record(r.topic, r.key, r.value)
        finally:
            consumer.close(autocommit=False)

    def committed_seq(self, tables: list[tuple[str, str]]) -> int:
        """The position of the newest change event of `tables` published now (the end of each
        topic partition, or of the input file). Debezium publishes in commit order, so every
        commit it has published is at or below it; commits it has not published yet cannot be
        known here: `readAfter = now` means what the topics hold now. -1 when they hold none."""
        # A few records back from each end: a delete's tombstone follows its event, and a broker
        # may answer an end offset below its last record (Tansu: the last batch's first offset).
        positions = (change_position(r.value) for r in self._records_to_end(tables, newest=8))
        return max((p for p in positions if p is not None), default=-1)

    def initial_copy(self, table: SourceTable, work_dir: Path) -> tuple[int, Iterator[pa.Table]]:
        """The table as the events there are now leave it, at the seq of the last complete transaction.

        Debezium's own snapshot (`op=r`) is at the start of the events, so the copy replays them
        (the file, or the topics from their earliest offsets) for this table alone and keeps the
        final row per key; the stream then applies what comes after that seq. With no events
        yet, the copy is empty at seq -1 and the snapshot arrives through the stream.
        """
        names = [c.name for c in table.columns]
        key_positions = [names.index(k) for k in table.key]
        rows: dict[tuple, list] = {}
        # The seq of each key's last change folded (deletes too), and of the last truncation:
        # snapshot records of another partition may come after later transactions (the
        # assembler gives them the snapshot's seq), and must not overwrite what those changed.
        changed_at: dict[tuple, int] = {}
        truncated_at = -1
        copy_seq, pending = -1, []
        assembler = Assembler([table], -1, self.config.unavailable_value_placeholder)

        def apply(event) -> None:
            """Changes count once their transaction commits (a snapshot still running does not)."""
            nonlocal copy_seq, pending
            if isinstance(event, Begin):
                pending = []
            elif isinstance(event, (RowChange, Truncate)):
                pending.append(event)
            elif isinstance(event, Commit):
                for change in pending:
                    fold(change, event.seq)
                pending = []
                copy_seq = max(copy_seq, event.seq)
            elif isinstance(event, Relation):
                raise TableError(
                    f"{table.qualified_name} changed columns within the Debezium events (now {list(event.columns)}); "
                    f"the replica has {names}: add the table again to describe it afresh"
                )

        def fold(event, seq: int) -> None:
            nonlocal truncated_at
            if seq < truncated_at:
                return
            if isinstance(event, Truncate):
                rows.clear()
                changed_at.clear()
                truncated_at = seq
            else:
                values = event.values
                key = tuple(values[i] for i in key_positions)
                if changed_at.get(key, -1) > seq:
                    return  # a late snapshot record of a key changed since
                changed_at[key] = seq
                if event.op == "delete":
                    rows.pop(key, None)
                    return
                base = key  # whose row completes values the event did not carry (unchanged TOAST)
                if event.old is not None:
                    old_key = tuple(event.old[i] for i in key_positions)
                    if old_key != key:
                        base = old_key  # a key change: the old key's row holds them
                        prev = rows.pop(old_key, None)
                        changed_at[old_key] = seq
                if UNSET in values:
                    prev = rows.get(key) if base == key else prev
                    if (prev is None and base != key) or event.inserted:
                        raise TableError(
                            f"{table.qualified_name}: the events move key {base!r} to {key!r} (or insert {key!r}) without "
                            f"some of its values (unchanged TOAST) and hold no earlier version of the row (or no `d` of its "
                            f"old key) to take them from; the topics must hold the table's snapshot and every change since"
                        )
                    values = [(prev[i] if prev is not None else None) if v is UNSET else v for i, v in enumerate(values)]
                rows[key] = values

        for record in self._records_to_end([(table.schema, table.name)]):
            assembler.feed(record)
            while assembler.out:
                apply(assembler.out.popleft())
        assembler.flush()
        while assembler.out:
            apply(assembler.out.popleft())
        log.info("initial copy of %s from the Debezium events: %d rows at seq %s", table.qualified_name, len(rows), copy_seq)
        schema = table.arrow_schema

        def chunks() -> Iterator[pa.Table]:
            values = list(rows.values())
            for start in range(0, len(values), 100_000):
                part = values[start:start + 100_000]
                columns = list(zip(*part))
                arrays = [decode_checked(python_values, col, f.type, f.name) for col, f in zip(columns, schema)]
                yield pa.Table.from_arrays(arrays, schema=schema)

        return copy_seq, chunks()

    def stream(self, from_seq: int, tables: list[SourceTable]) -> ChangeStream:
        return DebeziumStream(self.config, from_seq, tables)

    def drop(self) -> list[str]:
        if self.config.bootstrap_servers:
            return [
                f"nothing to drop for source {self.config.name}: Debezium owns the source's slot or binlog reader; "
                f"Kafka consumer group {self.config.group_id} keeps its committed offsets (delete it with "
                f"`kafka-consumer-groups.sh --delete --group {self.config.group_id}` if nothing else uses it)"
            ]
        return [f"nothing to drop for source {self.config.name}: its events are read from {self.config.path}"]
