"""Where records come from: a JSON-lines file or folder (followed like a topic), or Kafka."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Iterator

from htap.conf import SourceConfig
from htap.connectors.debezium.envelope import Record, maybe_json, parse_line
from htap.connectors.debezium.positions import change_position
from htap.errors import SourceError

# kafka-python logs every failed connection attempt; what matters reaches the user as a SourceError.
logging.getLogger("kafka").setLevel(logging.CRITICAL)


class FileTransport:
    """Records from a JSON-lines file or a folder of them (name order); follows appends."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.files: list[Path] = []
        self.index = 0
        self.offset = 0
        self.handle = None

    def _list(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir() if p.is_file() and not p.name.startswith("."))
        return [self.path] if self.path.exists() else []

    def read(self, limit: int = 5000) -> list[Record]:
        """Up to `limit` records; an empty list at the (current) end of the input."""
        out: list[Record] = []
        if not self.files or self.index >= len(self.files) - 1:
            self.files = self._list()
        while len(out) < limit and self.index < len(self.files):
            if self.handle is None:
                self.handle = open(self.files[self.index], "rb")
                self.handle.seek(self.offset)
            line = self.handle.readline()
            if line and not line.endswith(b"\n"):
                # A last line without its newline: complete if it parses, else still being written.
                try:
                    rec = parse_line(line.decode("utf-8"))
                except (SourceError, UnicodeDecodeError):
                    if self.index < len(self.files) - 1:
                        raise
                    self.handle.seek(self.offset)
                    break
                self.offset = self.handle.tell()
                if rec is not None:
                    out.append(rec)
                continue
            if not line:
                if self.index < len(self.files) - 1:
                    self.handle.close()
                    self.handle, self.index, self.offset = None, self.index + 1, 0
                    continue
                break  # the end, for now: the last file may still grow
            self.offset = self.handle.tell()
            rec = parse_line(line.decode("utf-8"))
            if rec is not None:
                out.append(rec)
        return out

    def commit(self, refs) -> None:
        pass

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def iter_file_records(path: str) -> Iterator[Record]:
    transport = FileTransport(path)
    try:
        while True:
            batch = transport.read()
            if not batch:
                return
            yield from batch
    finally:
        transport.close()


def newest_file_records(path: str, tail_bytes: int = 1 << 20) -> list[Record]:
    """The complete records in the last `tail_bytes` of the input's last non-empty file (the
    newest ones: a followed input only grows at its end); every record when none of those is a
    change event. A last line without its newline that does not parse is still being written."""
    files = [f for f in FileTransport(path)._list() if f.stat().st_size > 0]
    if not files:
        return []
    with open(files[-1], "rb") as f:
        start = max(0, f.seek(0, 2) - tail_bytes)
        f.seek(start)
        lines = f.read().split(b"\n")
    if start > 0:
        lines = lines[1:]  # cut by the chunk's start
    out: list[Record] = []
    for n, line in enumerate(lines):
        try:
            rec = parse_line(line.decode("utf-8"))
        except (SourceError, UnicodeDecodeError):
            if n == len(lines) - 1:
                break
            raise
        if rec is not None:
            out.append(rec)
    if start > 0 and all(change_position(r.value) is None for r in out):
        return list(iter_file_records(path))
    return out


def kafka_consumer(cfg: SourceConfig, topics: list[str], group: bool):
    try:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
    except ImportError as e:  # pragma: no cover
        raise SourceError(
            f"source {cfg.name} reads Debezium events from Kafka, whose driver (kafka-python) is not installed: "
            f"pip install 'spark-htap[kafka]'"
        ) from e
    try:
        return KafkaConsumer(
            *topics,
            bootstrap_servers=cfg.bootstrap_servers.split(","),
            group_id=cfg.group_id if group else None,
            enable_auto_commit=False,
            # Joining a group takes about half the session timeout (the coordinator waits for
            # members); Kafka clients default to 45 s, which would delay every start.
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=max(100, cfg.session_timeout_ms // 3),
            auto_offset_reset="earliest",
            key_deserializer=lambda b: maybe_json(b) if b is not None else None,
            value_deserializer=lambda b: json.loads(b) if b is not None else None,
            request_timeout_ms=max(30_000, cfg.session_timeout_ms + 5_000),
        )
    except KafkaError as e:
        raise SourceError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {e}; check bootstrap_servers and that the brokers are up") from e


def kafka_topics(cfg: SourceConfig, tables: Iterable[tuple[str, str]]) -> list[str]:
    if cfg.topics:
        data = list(cfg.topics)
    else:
        data = [f"{cfg.topic_prefix}.{schema}.{table}" for schema, table in tables]
    extra = [f"{cfg.topic_prefix}.transaction", cfg.topic_prefix] if cfg.topic_prefix else []
    return sorted(set(data + extra))


class KafkaTransport:
    """A thin kafka-python consumer: records in partition order; offsets committed on demand."""

    def __init__(self, cfg: SourceConfig, tables: Iterable[tuple[str, str]]):
        self.consumer = kafka_consumer(cfg, kafka_topics(cfg, tables), group=True)
        self.pending: dict = {}  # TopicPartition -> [[offset, seq or None], ...] in offset order

    def read(self, limit: int = 5000, timeout_ms: int = 200) -> list[Record]:
        polled = self.consumer.poll(timeout_ms=timeout_ms, max_records=limit)
        out = []
        for tp, records in polled.items():
            entries = self.pending.setdefault(tp, [])
            for r in records:
                entry = [r.offset, None]
                entries.append(entry)
                out.append(Record(r.topic, r.key, r.value, entry))
        return out

    def commit(self, seq: int) -> None:
        """Commit, per partition, the offsets whose records belong to transactions with seq <= `seq`."""
        from kafka.structs import OffsetAndMetadata

        def offset(n: int):
            if len(OffsetAndMetadata._fields) == 3:
                return OffsetAndMetadata(n, "", -1)
            return OffsetAndMetadata(n, "")  # kafka-python 2.0: no leader epoch

        offsets = {}
        for tp, entries in self.pending.items():
            n = 0
            while n < len(entries) and entries[n][1] is not None and entries[n][1] <= seq:
                n += 1
            if n:
                offsets[tp] = offset(entries[n - 1][0] + 1)
                del entries[:n]
        if offsets:
            self.consumer.commit(offsets)

    def close(self) -> None:
        self.consumer.close(autocommit=False)
