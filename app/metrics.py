"""The metrics and health endpoint of `htap serve` (`service.metrics_address`).

`GET /metrics`: Prometheus text exposition. Per source: lag in seconds (since its durable
position was last known current) and bytes (log written after it), the log the source retains
for the replica (Postgres: the slot's WAL, `wal_status`), whether that log was lost, the ingest
phase. Per table: freshness (seconds since its max safe seq was known current), max safe seq,
deltas, row versions, bytes, state, the named change feeds that hold a lease on it and the
lowest seq they keep. Durations of checkpoints, copies and compactions
(histograms, `htap.observe`), and the process's own CPU and memory. For an object-store
warehouse, the service's local cache (`htap_cache_*`): hits, misses, bytes fetched, cached
copies that failed their checksum, evictions, and its size against its limit. Executors keep
caches of their own, in their own processes; these figures are the service's only.

`GET /health`: 200 when every source streams and is within `service.health_max_lag_s`, else
503; the JSON body gives the reason per source either way.

Table and source figures are read from the metadata store at each scrape (so they are exactly
what `htap status` and the Spark catalog see). What the source retains comes from the service's
watcher, asked every `service.source_check_interval_s`, so a slow or unreachable source never
holds up a scrape.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from htap.conf import HtapConfig
from htap.errors import ConfigError
from htap.ingest.health import PHASE_STREAMING, PHASES, ServiceState
from htap.replica.changes import FEED_HOLDER
from htap.replica.metadata import MetadataStore
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    STATE_PENDING,
    STATE_STREAMING,
    STATE_UNHEALTHY,
)
from htap.replica.warehouse import ObjectStoreWarehouse, open_warehouse

log = logging.getLogger(__name__)

TABLE_STATES = (STATE_PENDING, STATE_COPYING, STATE_CATCHING_UP, STATE_STREAMING, STATE_UNHEALTHY, STATE_FAILED)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class HtapCollector(Collector):
    """Source and table figures, computed at each scrape."""

    def __init__(self, cfg: HtapConfig, state: ServiceState, clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.state = state
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        src = ["source"]
        up = _gauge("htap_source_up", "1 while the source's changes are streamed into the replica", src)
        phase = _gauge("htap_source_phase", "What the source's ingest does now (1 for the current phase)", src + ["phase"])
        lag_s = _gauge("htap_source_lag_seconds", "Seconds since the source's durable position was known current", src)
        position = _gauge("htap_source_durable_position", "The source's durable position (seq): every change up to it is in the replica", src)
        lag_b = _gauge("htap_source_lag_bytes", "Log the source wrote after the replica's durable position (bytes)", src)
        retained = _gauge("htap_source_retained_wal_bytes", "Log the source keeps for the replica (Postgres: the slot's WAL)", src)
        warning = _gauge("htap_source_retained_wal_warning_bytes", "service.retained_wal_warning_bytes (0: no warning)", src)
        wal_status = _gauge("htap_source_slot_wal_status", "The slot's wal_status (1 for the current one)", src + ["status"])
        lost = _gauge("htap_source_log_lost", "1 when the source no longer holds log the replica needs (tables are re-copied)", src)
        observed = _gauge("htap_source_observed_timestamp_seconds", "When the source was last asked what it retains", src)
        recoveries = CounterMetricFamily("htap_source_log_recoveries", "Lost-log recoveries (tables re-copied) by this process", labels=src)
        visible = _gauge("htap_source_visible_seq", "The source's visible seq: every change up to it is readable through the"
                         " in-memory tail (spark.htap.readTail), durable or not", src)
        tail_bytes = _gauge("htap_source_tail_bytes", "Memory the source's in-memory tail holds (service.tail_bytes bounds it)", src)
        tail_pins = _gauge("htap_source_tail_pins", "Queries holding a pin of the source's in-memory tail", src)
        stream_delay = _gauge("htap_source_stream_delay_seconds", "Seconds from the newest commit the stream received"
                              " to its arrival there (by the source's clock): the source or decoding falling behind", src)
        tab = ["source", "table"]
        freshness = _gauge("htap_table_freshness_seconds", "Seconds since the table's max safe seq was known current", tab)
        safe_seq = _gauge("htap_table_max_safe_seq", "The table's max safe seq: reads at or below it are exact", tab)
        safe_time = _gauge("htap_table_max_safe_timestamp_seconds", "When the table's max safe seq was known current (epoch s)", tab)
        deltas = _gauge("htap_table_deltas", "Live delta files of the table", tab)
        partitions = _gauge("htap_table_partitions", "Key-range partitions of the table now (split and merged online)", tab)
        versions = _gauge("htap_table_row_versions", "Row versions in the table's live deltas", tab)
        size = _gauge("htap_table_bytes", "Bytes of the table's live deltas", tab)
        state = _gauge("htap_table_state", "The table's state (1 for the current one)", tab + ["state"])
        feeds = _gauge("htap_table_change_feed_pins", "Named change feeds holding a lease on the table (feedName)", tab)
        feed_seq = _gauge("htap_table_change_feed_pinned_seq",
                          "The lowest seq a named change feed keeps (compaction keeps every version above it)", tab)

        with MetadataStore(self.cfg.metadata) as store:
            for name in self.cfg.sources:
                health = self.state.get(name)
                up.add_metric([name], 1.0 if health.phase == PHASE_STREAMING else 0.0)
                for p in PHASES:
                    phase.add_metric([name, p], 1.0 if p == health.phase else 0.0)
                at, pos = store.source_position_time(name), store.source_position(name)
                if at is not None:
                    lag_s.add_metric([name], max(0.0, now - at))
                if pos is not None:
                    position.add_metric([name], float(pos))
                warning.add_metric([name], float(self.cfg.service.retained_wal_warning_bytes))
                r = health.retention
                if r is not None:
                    if r.lag_bytes is not None:
                        lag_b.add_metric([name], float(r.lag_bytes))
                    if r.retained_bytes is not None:
                        retained.add_metric([name], float(r.retained_bytes))
                    if r.state and r.what.startswith("slot"):
                        wal_status.add_metric([name, r.state], 1.0)
                    lost.add_metric([name], 1.0 if r.lost else 0.0)
                if health.observed_at is not None:
                    observed.add_metric([name], health.observed_at)
                recoveries.add_metric([name], float(health.log_recoveries))
                watch = self.state.watches.get(name)
                if watch is not None and watch.arrival_delay_s is not None:
                    stream_delay.add_metric([name], watch.arrival_delay_s)
                tail = self.state.tails.stores.get(name) if self.state.tails is not None else None
                if tail is not None:
                    now_tail = tail.status()
                    visible.add_metric([name], float(now_tail["visible"]))
                    tail_bytes.add_metric([name], float(now_tail["bytes"]))
                    tail_pins.add_metric([name], float(now_tail["pins"]))
            for t in store.list_tables(views=True):  # views have deltas and partitions too
                labels = [t.source, t.qualified_name]
                n, rows, nbytes = store.delta_stats(t.id)
                deltas.add_metric(labels, float(n))
                partitions.add_metric(labels, float(len(t.layout.ids)))
                versions.add_metric(labels, float(rows))
                size.add_metric(labels, float(nbytes))
                for s in TABLE_STATES:
                    state.add_metric(labels + [s], 1.0 if s == t.state else 0.0)
                held = [p.seq for p in store.live_pins(t.id) if p.holder.startswith(FEED_HOLDER)]
                feeds.add_metric(labels, float(len(held)))
                if held:
                    feed_seq.add_metric(labels, float(min(held)))
                if t.max_safe_seq is not None:
                    safe_seq.add_metric(labels, float(t.max_safe_seq))
                if t.max_safe_time is not None:
                    safe_time.add_metric(labels, t.max_safe_time)
                    freshness.add_metric(labels, max(0.0, now - t.max_safe_time))
        yield from (up, phase, lag_s, position, lag_b, retained, warning, wal_status, lost, observed, recoveries,
                    visible, tail_bytes, tail_pins, stream_delay,
                    freshness, safe_seq, safe_time, deltas, partitions, versions, size, state, feeds, feed_seq)
        yield from self._cache()

    def _cache(self) -> Iterator[Metric]:
        """The service's cache in front of an object-store warehouse (a local one has none)."""
        warehouse = open_warehouse(self.cfg)
        if not isinstance(warehouse, ObjectStoreWarehouse):
            return
        cache, labels = warehouse.cache, [warehouse.location]
        for name, doc, value in (
            ("htap_cache_hits", "Reads of a warehouse file served by a verified cached copy", cache.hits),
            ("htap_cache_misses", "Reads of a warehouse file that fetched it from the object store", cache.misses),
            ("htap_cache_fetched_bytes", "Bytes downloaded from the object store into the cache", cache.fetched_bytes),
            ("htap_cache_refetched", "Cached copies that failed their checksum and were fetched again", cache.refetched),
            ("htap_cache_evictions", "Files evicted from the cache (least recently used, past cache_bytes)", cache.evictions),
        ):
            counter = CounterMetricFamily(name, doc + " (this process)", labels=["warehouse"])
            counter.add_metric(labels, float(value))
            yield counter
        for name, doc, value in (("htap_cache_bytes", "Bytes in the local cache now", cache.size()),
                                 ("htap_cache_limit_bytes", "replica.cache_bytes: the cache's size limit", cache.limit)):
            gauge = _gauge(name, doc, ["warehouse"])
            gauge.add_metric(labels, float(value))
            yield gauge


@dataclass(frozen=True)
class Health:
    ok: bool
    body: dict

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


def health(cfg: HtapConfig, state: ServiceState, now: float | None = None) -> Health:
    """Every source streaming, none lagging more than health_max_lag_s, none with lost log.
    Failed or unhealthy tables do not make the service unhealthy (their reads fail over to the
    source, each says why in `htap status`); they are listed."""
    now = time.time() if now is None else now
    reasons, sources = [], {}
    max_lag = cfg.service.health_max_lag_s
    with MetadataStore(cfg.metadata) as store:
        tables = store.list_tables()
        for name in cfg.sources:
            h = state.get(name)
            at = store.source_position_time(name)
            lag = None if at is None else max(0.0, now - at)
            if h.phase != PHASE_STREAMING:
                reasons.append(f"source {name}: {h.phase}: {h.reason}")
            elif max_lag and lag is not None and lag > max_lag:
                reasons.append(f"source {name}: its durable position is {lag:.0f} s old, more than service.health_max_lag_s = {max_lag:g}")
            if h.retention is not None and h.retention.lost:
                reasons.append(f"source {name}: {h.retention.lost}")
            mine = [t for t in tables if t.source == name]
            sources[name] = {
                "phase": h.phase,
                "reason": h.reason,
                "since": h.since,
                "lag_s": lag,
                "retained_bytes": h.retention.retained_bytes if h.retention else None,
                "retention": h.retention.note if h.retention else h.observe_error,
                "tables": {s: n for s in TABLE_STATES if (n := sum(t.state == s for t in mine))},
                "not_readable": sorted(f"{t.qualified_name} ({t.state})" for t in mine if not t.readable),
            }
    return Health(not reasons, {"status": "ok" if not reasons else "unavailable", "reasons": reasons, "sources": sources})


class MetricsServer:
    """The HTTP endpoint, on a daemon thread of its own."""

    def __init__(self, cfg: HtapConfig, state: ServiceState):
        endpoint = cfg.service.metrics_endpoint
        assert endpoint is not None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(HtapCollector(cfg, state))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY) + generate_latest(registry))
                    elif path in ("/health", "/healthz"):
                        h = health(cfg, state)
                        self._send(h.status, "application/json", json.dumps(h.body, indent=1).encode())
                    else:
                        self._send(404, "text/plain", b"spark-htap: GET /metrics (Prometheus) or /health\n")
                except Exception as e:  # a scrape must never take the service down; say what broke
                    log.exception("metrics endpoint: %s failed", path)
                    self._send(500, "text/plain", f"{type(e).__name__}: {e}\n".encode())

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
                log.debug("metrics endpoint: " + format, *args)

        try:
            self.httpd = ThreadingHTTPServer(endpoint, Handler)
        except OSError as e:
            raise ConfigError(
                f"{cfg.path}: service.metrics_address = {cfg.service.metrics_address!r}: cannot listen there: {e}; "
                f"pick a free port, or leave it empty to turn the endpoint off"
            ) from e
        self.httpd.daemon_threads = True
        host, port = self.httpd.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
