"""Manifests: the warehouse alone can rebuild the metadata store.

After every checkpoint (and every initial copy and compaction swap) the service writes one small
JSON object per source, `_manifests/<source>.json`, next to the deltas: the source's durable
position, its tables (schemas, partitions, seqs, states) and every live delta with its checksums
and truncations — the metadata store's rows for that source, read in one transaction. The
manifest is written before the position is confirmed to the source, so the position a source
has been told is never newer than the one in its manifest: a store rebuilt from manifests
(`htap recover`) resumes streaming at or after everything the source may have forgotten, and
skips what its deltas already hold. Garbage collection only deletes deltas that a later
manifest no longer names (a pass whose manifest write failed collects nothing).

An idle source's checkpoints change nothing but positions (the source position, the tables' max
safe seqs and times): those skip the write, up to IDLE_REWRITE_S after the last one (so an idle
source costs one PUT a minute, not one per checkpoint, about two a second). The source may then
have been told a position newer than its manifest's, but only past a stretch in which none of
its tables changed: a store recovered from that manifest resumes at its older position, and
re-reads (MySQL, Debezium) or is sent from the slot's newer position (Postgres) nothing that its
tables need. The rewrite at least every IDLE_REWRITE_S keeps the recovered position recent, so a
source whose log expires (a MySQL binlog) still holds it.

What a manifest does not keep: leases, deltas compaction retired, recorded scans, and the seq <->
time points of time travel other than the last (after a recovery, `TIMESTAMP AS OF` finds only
the recovered position; `VERSION AS OF` reaches back to each table's copy, or to the newest
repartition whose older partitions were already collected: the recovered window starts there).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from htap.errors import DAMAGE_PREFIX, ReplicaError
from htap.replica.metadata import SCHEMA_VERSION, MetadataStore
from htap.replica.models import STATE_UNHEALTHY
from htap.replica.warehouse import Warehouse

log = logging.getLogger(__name__)

FOLDER = "_manifests"
FORMAT = 1
IDLE_REWRITE_S = 60.0  # an unchanged manifest is still rewritten this often (its position moves on)
# What an idle checkpoint moves: a manifest differing from the last one only in these is not written.
POSITIONS = {"sources": ("position", "position_time", "updated_at"), "tables": ("max_safe_seq", "max_safe_time")}
_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()
_WRITTEN: dict[tuple[str, str], tuple[str, float]] = {}  # (warehouse, source) -> (content digest, when written)


def manifest_path(source: str) -> str:
    return f"{FOLDER}/{source}.json"


def _lock(warehouse: Warehouse, source: str) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault((warehouse.location, source), threading.Lock())


def content_digest(dump: dict[str, list[dict]]) -> str:
    """A digest of a dumped source without its positions: equal for two states between which
    only an idle checkpoint happened."""
    stable = {name: [{k: v for k, v in row.items() if k not in POSITIONS.get(name, ())} for row in rows]
              for name, rows in dump.items()}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()


def write_manifest(warehouse: Warehouse, store: MetadataStore, source: str,
                   clock: Callable[[], float] = time.monotonic) -> dict | None:
    """Write the source's manifest (durable when this returns); None when it was skipped: only
    positions moved since this process last wrote it, less than IDLE_REWRITE_S ago. Writers of
    one process (the ingest and the compactor) take turns, so an older state never replaces a
    newer one."""
    key = (warehouse.location, source)
    with _lock(warehouse, source):
        dump = store.dump_source(source)
        digest, now = content_digest(dump), clock()
        last = _WRITTEN.get(key)
        if last is not None and last[0] == digest and now - last[1] < IDLE_REWRITE_S:
            return None
        doc = {"format": FORMAT, "metadata_schema": SCHEMA_VERSION, "source": source, "written_at": time.time(), **dump}
        warehouse.put_bytes(manifest_path(source), json.dumps(doc, separators=(",", ":")).encode())
        _WRITTEN[key] = (digest, now)
    return doc


def read_manifests(warehouse: Warehouse) -> dict[str, dict]:
    """Every manifest in the warehouse, by source name."""
    out = {}
    for rel in warehouse.list(FOLDER):
        if not rel.endswith(".json"):
            continue
        raw = warehouse.get_bytes(rel)
        if raw is None:
            continue
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ReplicaError(f"manifest {warehouse.url(rel)} is not valid JSON ({e}): restore it from a backup") from e
        if doc.get("format") != FORMAT:
            raise ReplicaError(f"manifest {warehouse.url(rel)} has format {doc.get('format')}; this spark-htap reads {FORMAT}")
        out[doc["source"]] = doc
    return out


@dataclass(frozen=True)
class Recovered:
    source: str
    position: int | None
    tables: int
    deltas: int
    written_at: float
    missing: list[str] = field(default_factory=list)  # delta files the manifest names but the warehouse lacks


def recover(warehouse: Warehouse, store: MetadataStore, sources: list[str], window_s: float) -> list[Recovered]:
    """Rebuild the metadata of `sources` in `store` (which must not know them) from their
    manifests. A table whose files are missing is marked unhealthy (its reads fail over to the
    source; `htap tables recopy` rebuilds it)."""
    manifests = read_manifests(warehouse)
    lacking = [s for s in sources if s not in manifests]
    if lacking:
        found = ", ".join(sorted(manifests)) or "none"
        raise ReplicaError(
            f"no manifest for source(s) {', '.join(lacking)} in {warehouse.location}/{FOLDER} (found: {found});"
            f" was the service ever run with this warehouse?"
        )
    known = {t.source for t in store.list_tables()}
    for source in sources:
        if source in known or store.source_position(source) is not None:
            raise ReplicaError(
                f"metadata store {store.location} already has source {source}: recover into an empty store"
                f" (move the old one away, or `htap recover --force` to replace what it has of the source)"
            )
    present = set(warehouse.list())
    out = []
    for source in sources:
        doc = dict(manifests[source])
        # Deltas a repartition retired (for reads below its seq) whose files are gone were being
        # collected: reads below that seq are over, the recovered window starts at it.
        kept = [d for d in doc.get("deltas", []) if d.get("retired_at") is None or _stored(d, present)]
        floor = max([0, *(_window_floor(doc, kept))])
        doc["deltas"] = kept
        store.restore_source(doc, (floor, time.time() - window_s) if floor else None)
        missing = []
        for d in kept:
            names = [d["path"]] + ([d["path"] + ".dv"] if d.get("dv_checksum") else [])
            lost = [n for n in names if n not in present]
            if lost:
                missing += lost
                store.set_state(d["table_id"], STATE_UNHEALTHY,
                                f"{DAMAGE_PREFIX}delta file {warehouse.url(lost[0])} is missing after recovery;"
                                f" `htap tables recopy` rebuilds the table")
        position = (doc.get("sources") or [{}])[0].get("position")
        out.append(Recovered(source, position, len(doc.get("tables", [])), len(doc.get("deltas", [])),
                             doc.get("written_at", 0.0), missing))
        log.info("recovered source %s at position %s: %d tables, %d deltas", source, position, out[-1].tables,
                 out[-1].deltas)
    return out


def _stored(delta: dict, present: set[str]) -> bool:
    return delta["path"] in present and (not delta.get("dv_checksum") or delta["path"] + ".dv" in present)


def _window_floor(doc: dict, deltas: list[dict]) -> list[int]:
    """Per table, the seq of its newest repartition none of whose retired deltas remain: reads
    below it would need partitions that no longer exist."""
    until = {(d["table_id"], d.get("until_seq")) for d in deltas if d.get("until_seq") is not None}
    by_table: dict[int, list[int]] = {}
    for layout in doc.get("layouts", []):
        by_table.setdefault(layout["table_id"], []).append(layout["from_seq"])
    return [max((s for s in seqs[1:] if (table, s) not in until), default=0)
            for table, seqs in ((t, sorted(v)) for t, v in by_table.items())]


def forget(store: MetadataStore, source: str) -> None:
    """Remove what a store has of a source (`htap recover --force`)."""
    for table in store.list_tables(source):
        store.remove_table(table.id)
    store.forget_source(source)
