"""Durations of the service's long operations, as Prometheus histograms.

Defined at the bottom of the layers so that the code that does the work (checkpoints in
`htap.ingest`, copies, compaction in `htap.replica`) can time itself without knowing who
exports the figures: `htap serve` serves this process's default registry on its metrics
endpoint (`htap.app.metrics`). Only the service records anything; Spark executors never
import the modules that do.
"""

from __future__ import annotations

from prometheus_client import Histogram

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
