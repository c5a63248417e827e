"""What the running service knows about itself: per source, what its ingest is doing (phase)
and what the source last said it retains for the replica. Read by the metrics and health
endpoint (`htap.app.metrics`); written by the ingest threads and the source watcher.

The watcher (`watch_sources`) asks every source at `service.source_check_interval_s` how much
log it keeps for the replica and how far behind the replica is, and says so in the log when the
retained log crosses `service.retained_wal_warning_bytes` or the source lost log the replica
needs (the ingest then re-copies the source's tables: `SourceIngest.protect_log`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace

from htap.conf import HtapConfig
from htap.connectors.changes import Retention
from htap.connectors.registry import open_source
from htap.errors import HtapError
from htap.replica.metadata import MetadataStore

log = logging.getLogger(__name__)

PHASE_STARTING = "starting"  # checking and preparing the source
PHASE_COPYING = "copying"  # initial copy (or re-copy) of a table: the source is not streamed meanwhile
PHASE_STREAMING = "streaming"  # following the change stream
PHASE_RECOVERING = "recovering"  # the source lost log the replica needed: its tables are being re-copied
PHASE_RETRYING = "retrying"  # the source failed (connection, server); the service retries
PHASE_STOPPED = "stopped"
PHASES = (PHASE_STARTING, PHASE_COPYING, PHASE_STREAMING, PHASE_RECOVERING, PHASE_RETRYING, PHASE_STOPPED)


@dataclass(frozen=True)
class SourceHealth:
    phase: str = PHASE_STARTING
    reason: str = "starting"
    since: float = 0.0  # wall clock of the last phase change
    retention: Retention | None = None  # the source's last answer (None: not asked yet, or it failed)
    observed_at: float | None = None  # when `retention` was asked (before reading the durable position it compares)
    observe_error: str | None = None  # why the last question failed
    log_recoveries: int = 0  # times this process found the source's log lost and re-copied its tables


@dataclass
class ServiceState:
    """Thread-safe record of every source's health; one per `htap serve` process."""

    sources: dict[str, SourceHealth] = field(default_factory=dict)
    tails: object = None  # htap.ingest.tail.Tails of the service, when it serves the in-memory tail
    watches: dict[str, object] = field(default_factory=dict)  # per streaming source, its htap.ingest.stalls.StallWatch
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def phase(self, source: str, phase: str, reason: str) -> None:
        with self._lock:
            old = self.sources.get(source, SourceHealth())
            if (old.phase, old.reason) != (phase, reason):
                self.sources[source] = replace(old, phase=phase, reason=reason, since=time.time())

    def observed(self, source: str, at: float, retention: Retention | None, error: str | None = None) -> None:
        """The source's answer to a question asked at `at` (before its durable position was read)."""
        with self._lock:
            old = self.sources.get(source, SourceHealth())
            self.sources[source] = replace(old, retention=retention if error is None else old.retention,
                                           observed_at=at, observe_error=error)

    def recovered(self, source: str) -> None:
        with self._lock:
            old = self.sources.get(source, SourceHealth())
            self.sources[source] = replace(old, log_recoveries=old.log_recoveries + 1)

    def get(self, source: str) -> SourceHealth:
        with self._lock:
            return self.sources.get(source, SourceHealth())


def check_retention(cfg: HtapConfig, name: str, retention: Retention, warned: set[str]) -> None:
    """Log what an operator must know about the source's retained log, once per crossing:
    more than the warning threshold, about to be removed (Postgres: unreserved), lost.
    `warned` holds "<source>:<condition>" for the conditions currently true."""
    limit = cfg.service.retained_wal_warning_bytes
    if retention.retained_bytes is None:  # unknown (e.g. a lost slot): no news about the threshold
        over = f"{name}:over" in warned
    else:
        over = bool(limit) and retention.retained_bytes > limit
    conditions = {
        "over": (over, lambda: log.warning(
            "source %s: %s retains %d bytes of log for the replica, more than service.retained_wal_warning_bytes = %d "
            "(%s); if the replica cannot catch up, cap it with max_slot_wal_keep_size (see the docs, Operations)",
            name, retention.what, retention.retained_bytes, limit, retention.state or "")),
        "unreserved": (retention.state == "unreserved", lambda: log.warning("source %s: %s", name, retention.note)),
        "lost": (bool(retention.lost), lambda: log.error(
            "source %s: %s; `htap serve` copies its tables again (reads fail over to the source meanwhile)",
            name, retention.lost)),
    }
    for condition, (now, say) in conditions.items():
        key = f"{name}:{condition}"
        if now and key not in warned:
            warned.add(key)
            say()
        elif not now and key in warned:
            warned.discard(key)
            if condition == "over":
                log.info("source %s: retained log back under %d bytes (%d)", name, limit, retention.retained_bytes or 0)


def watch_sources(cfg: HtapConfig, state: ServiceState, stop: threading.Event) -> None:
    """Ask every source what it retains for the replica, every source_check_interval_s."""
    warned: set[str] = set()
    sources = {}
    while not stop.is_set():
        asked = time.time()
        with MetadataStore(cfg.metadata) as store:
            positions = {name: store.source_position(name) for name in cfg.sources}
        for name, config in cfg.sources.items():
            try:
                if name not in sources:
                    sources[name] = open_source(config)
                retention = sources[name].retention(positions[name])
            except HtapError as e:
                state.observed(name, asked, None, str(e))
                continue
            except Exception as e:  # a bug: keep watching the other sources
                log.exception("source %s: checking its retained log failed", name)
                state.observed(name, asked, None, f"unexpected {type(e).__name__}: {e}")
                continue
            state.observed(name, asked, retention)
            if retention is not None:
                check_retention(cfg, name, retention, warned)
        stop.wait(cfg.service.source_check_interval_s)
