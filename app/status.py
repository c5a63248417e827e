"""What `htap status` reports: per source its durable position and lag, per HTAP table its
state, rows, deltas, safe seq, delay, routing and errors."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import pyarrow as pa

from htap.conf import HtapConfig
from htap.connectors.changes import Retention
from htap.connectors.registry import open_source
from htap.errors import HtapError
from htap.pushdown.replica_reader import read_plan
from htap.replica.metadata import MetadataStore, running_services
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    STATE_PENDING,
    STATE_STREAMING,
    STATE_UNHEALTHY,
    TableInfo,
)
from htap.replica.read_plans import pin_and_plan
from htap.replica.tail import statuses as tail_statuses
from htap.replica.warehouse import open_warehouse
from htap.rewrite.pushed import count_plan
from htap.seq import PLAIN

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableStatus:
    source: str
    table: str
    state: str
    rows: int | None  # current rows at the max safe seq (None while not readable)
    deltas: int
    partitions: int  # key-range partitions now (splits and merges change them online)
    row_versions: int
    bytes: int
    max_safe_seq: int | None
    max_safe_position: str | None  # the seq in the source's own notation (LSN, binlog position)
    delay_s: float | None  # now - the wall clock at which max_safe_seq was known current
    failover: bool
    last_route: str | None
    error: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def current_rows(cfg: HtapConfig, store: MetadataStore, table: TableInfo) -> int | None:
    if not table.readable:
        return None
    out = pa.schema([pa.field("n", pa.int64())])
    count = count_plan(table.qualified_name)
    total = 0
    for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
        for batch in read_plan(open_warehouse(cfg), table.qualified_name, table.arrow_schema, list(table.key), plan, count, out):
            total += batch.column(0)[0].as_py() if batch.num_rows else 0
    return total


def table_statuses(cfg: HtapConfig) -> list[TableStatus]:
    store = MetadataStore(cfg.metadata)
    try:
        out = []
        now = time.time()
        codecs = {name: s.codec for name, s in cfg.sources.items()}
        for t in store.list_tables(views=True):  # a view's rows are its groups
            n, versions, size = store.delta_stats(t.id)
            out.append(
                TableStatus(
                    source=t.source,
                    table=t.qualified_name,
                    state=t.state,
                    rows=current_rows(cfg, store, t),
                    deltas=n,
                    partitions=len(t.layout.ids),
                    row_versions=versions,
                    bytes=size,
                    max_safe_seq=t.max_safe_seq,
                    max_safe_position=codecs.get(t.source, PLAIN).format(t.max_safe_seq),
                    delay_s=None if t.max_safe_time is None else round(max(0.0, now - t.max_safe_time), 3),
                    failover=t.failover,
                    last_route=next((f"{s.route}: {s.reason}" for s in store.recent_scans(t.id, 1)), None),
                    error=t.error,
                )
            )
        return out
    finally:
        store.close()


@dataclass(frozen=True)
class SourceStatus:
    source: str
    kind: str
    position: int | None  # every change up to it is durable in the replica
    position_text: str | None
    lag_s: float | None  # now - when that position was last confirmed current
    tables: int
    unhealthy: int  # damaged files: reads fail over until verified or re-copied
    failed: int = 0  # a value or change could not be applied: not followed; see each table's error
    retained_bytes: int | None = None  # log the source keeps for the replica (Postgres: the slot's WAL)
    retention: str | None = None  # one line: what the source retains for the replica and its state
    visible: int | None = None  # readable through the running service's in-memory tail (readTail)
    visible_text: str | None = None
    tail_bytes: int | None = None  # memory that tail holds
    tail_pins: int | None = None  # queries holding a pin of it

    def to_dict(self) -> dict:
        return asdict(self)


def retention_text(r: Retention | None) -> str | None:
    if r is None:
        return None
    parts = [r.what]
    if r.retained_bytes is not None:
        parts.append(f"{_size(r.retained_bytes)} behind ({r.retained_bytes} bytes)")
    if r.state:
        parts.append(f"wal_status {r.state}" if r.what.startswith("slot") else r.state)
    if r.active is not None:
        parts.append("active" if r.active else "inactive")
    if r.confirmed:
        parts.append(f"confirmed {r.confirmed}")
    text = ", ".join(parts)
    return f"{text}: {r.note}" if r.note else text


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@dataclass(frozen=True)
class ServiceStatus:
    running: bool  # an `htap serve` wrote a heartbeat within SERVICE_STALE_S
    services: list[dict]  # the running ones: id (host:pid), host, pid, started_at, beat_at, sources
    last_beat_s: float | None  # seconds since the newest heartbeat of any service (None: none recorded)
    last_service: str | None  # the id of that service

    def to_dict(self) -> dict:
        return asdict(self)


# Table states a running service moves on; without one they stand still.
SERVED_STATES = (STATE_PENDING, STATE_COPYING, STATE_CATCHING_UP, STATE_STREAMING)


def service_status(cfg: HtapConfig) -> ServiceStatus:
    with MetadataStore(cfg.metadata) as store:
        beats = store.service_beats()
    now = time.time()
    running = running_services(beats, now)
    return ServiceStatus(
        running=bool(running), services=running,
        last_beat_s=round(max(0.0, now - beats[0]["beat_at"]), 1) if beats else None,
        last_service=beats[0]["id"] if beats else None,
    )


def source_statuses(cfg: HtapConfig) -> list[SourceStatus]:
    with MetadataStore(cfg.metadata) as store:
        now = time.time()
        tails = tail_statuses(list(cfg.sources), store.service_beats(), now, cfg.service.tail_secret)
        out = []
        for name, src in cfg.sources.items():
            tables = store.list_tables(name)
            position = store.source_position(name)
            at = store.source_position_time(name)
            try:
                retention = open_source(src).retention(position)
                text = retention_text(retention)
            except HtapError as e:
                retention, text = None, f"retention unknown: {e}"
            out.append(SourceStatus(
                source=name, kind=src.kind, position=position, position_text=src.codec.format(position),
                lag_s=None if at is None else round(max(0.0, now - at), 3), tables=len(tables),
                unhealthy=sum(t.state == STATE_UNHEALTHY for t in tables),
                failed=sum(t.state == STATE_FAILED for t in tables),
                retained_bytes=retention.retained_bytes if retention else None, retention=text,
                visible=tails.get(name, {}).get("visible"), tail_bytes=tails.get(name, {}).get("bytes"),
                tail_pins=tails.get(name, {}).get("pins"),
                visible_text=src.codec.format(tails[name]["visible"]) if name in tails else None,
            ))
        return out
