"""Durations of the service's long operations, as Prometheus histograms.

Defined at the bottom of the layers so that the code that does the work (checkpoints in
`htap.ingest`, copies, compaction in `htap.replica`) can time itself without knowing who
exports the figures: `htap serve` serves this process's default registry on its metrics
endpoint (`htap.app.metrics`). Only the service records anything; Spark executors never
import the modules that do.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from prometheus_client import Counter, Histogram

# Checkpoints run every flush interval (0.5 s by default): most take milliseconds.
_SHORT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Copies and compactions of large tables take minutes.
_LONG = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

CHECKPOINT_SECONDS = Histogram(
    "htap_checkpoint_seconds", "Checkpoints: buffered changes written as deltas, committed and confirmed",
    ["source"], buckets=_SHORT,
)
COPY_SECONDS = Histogram(
    "htap_copy_seconds", "Initial copies (and re-copies) of a table, from the snapshot to visible deltas",
    ["source", "table"], buckets=_LONG,
)
COMPACTION_SECONDS = Histogram(
    "htap_compaction_seconds", "Compaction merges of one partition's deltas", ["source", "table", "kind"],
    buckets=_LONG,
)
REPARTITION_SECONDS = Histogram(
    "htap_repartition_seconds", "Online splits and merges of partitions (htap.replica.repartition)",
    ["source", "table", "kind"], buckets=_LONG,
)
CHECKPOINT_PHASE_SECONDS = Histogram(
    "htap_checkpoint_phase_seconds",
    "Where a checkpoint's time goes (htap.observe.Phases): waiting for locks, decoding, the key index and"
    " deletion vectors, Parquet writes, making files durable, the metadata commit, the manifest",
    ["source", "phase"], buckets=_SHORT,
)
PARTITION_LOCK_HELD_SECONDS = Histogram(
    "htap_partition_lock_held_seconds",
    "How long compaction held a partition's writer lock (checkpoints of the partition wait meanwhile)",
    ["source", "table"], buckets=_SHORT,
)
KEY_INDEX_OPENS = Counter(
    "htap_key_index_opens",
    "A partition's key index at its first use in this process (htap.replica.keyindex): loaded from its stored"
    " file (outcome loaded), or built from the deltas because none was stored (missing), the stored one was"
    " damaged (damaged) or covered deltas no longer live (stale)",
    ["outcome"],
)


class Phases:
    """Seconds spent per named phase of one operation, summed. Code deep in the call tree adds
    to the thread's current recorder (`phase`) without being passed one; with none it costs
    one thread-local lookup."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def __enter__(self) -> "Phases":
        self._outer = getattr(_current, "phases", None)
        _current.phases = self
        return self

    def __exit__(self, *exc) -> None:
        _current.phases = self._outer

    def text(self) -> str:
        return ", ".join(f"{k} {v:.3f}" for k, v in self.seconds.items())


_current = threading.local()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block into the thread's current Phases, if any."""
    phases = getattr(_current, "phases", None)
    if phases is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        phases.add(name, time.perf_counter() - started)
