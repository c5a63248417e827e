"""Is a table's replica damaged? The one check that may mark a table unhealthy, and undo it.

Only damage — a delta file that is missing or cannot be read as Parquet — makes a table
unhealthy (its reads then fail over to the source). A failing query of our own over intact
files is a bug in spark-htap, not damage: it fails that query and nothing else. Every table
marked unhealthy by a read or by compaction carries `DAMAGE_PREFIX` in its error, so the
service's automatic re-check (and `htap tables recheck`) can tell it from a table that
`htap verify data --mark-unhealthy` found to differ from its source (files intact, data wrong:
only a re-copy recovers that).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from htap.errors import DAMAGE_PREFIX, DamagedReplicaError
from htap.replica.metadata import MetadataStore
from htap.replica.models import STATE_STREAMING, STATE_UNHEALTHY, TableInfo
from htap.replica.warehouse import Warehouse, as_warehouse

log = logging.getLogger(__name__)

# What reads before issue 12 recorded for any failing replica query, damage or not (our own SQL
# errors too): re-checked automatically as well, so such tables recover.
LEGACY_PREFIX = "cannot read the deltas of table "
RECHECK_INTERVAL_S = 60.0  # how often the service re-checks a table marked damaged


def file_damage(path: Path) -> str | None:
    """Why the delta file at `path` is damaged (missing, not Parquet, unreadable pages), or None.

    Reads every page: a corrupt page behind an intact footer is damage too. Only called on the
    failure path and by re-checks, never per query."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return f"delta file {path} is missing"
    try:
        with pq.ParquetFile(path) as f:
            for _ in f.iter_batches(batch_size=64 * 1024):
                pass
    except (OSError, pa.ArrowException) as e:
        return f"delta file {path} is corrupt: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return None


def first_damage(files: list[str] | list[Path]) -> str | None:
    for f in files:
        problem = file_damage(Path(f))
        if problem:
            return problem
    return None


def damaged(table_label: str, problem: str) -> DamagedReplicaError:
    return DamagedReplicaError(f"{DAMAGE_PREFIX}{problem} (table {table_label}); `htap tables recopy` rebuilds it")


def mark_damaged(store: MetadataStore, table_id: int, error: DamagedReplicaError) -> None:
    store.set_state(table_id, STATE_UNHEALTHY, str(error))


@dataclass(frozen=True)
class Recheck:
    table: str
    was: str
    now: str
    detail: str


def recheck(warehouse: Warehouse | Path, store: MetadataStore, table: TableInfo) -> Recheck:
    """Check every live delta file of an unhealthy table; if all are intact, make it healthy
    again (its reads return to the replica once the next checkpoint advances it)."""
    name = f"{table.source}.{table.qualified_name}"
    if table.state != STATE_UNHEALTHY:
        return Recheck(name, table.state, table.state, "not unhealthy: nothing to do")
    deltas = store.deltas(table.id)
    try:
        with as_warehouse(warehouse).local({d.path: d.checksum for d in deltas}) as root:
            problem = first_damage([root / d.path for d in deltas])
    except DamagedReplicaError as e:  # an object that does not match its checksum
        problem = str(e).removeprefix(DAMAGE_PREFIX)
    if problem:
        error = damaged(name, problem)
        store.set_state(table.id, STATE_UNHEALTHY, str(error))
        return Recheck(name, table.state, STATE_UNHEALTHY, str(error))
    store.set_state(table.id, STATE_STREAMING, None)
    log.info("%s: every delta file is intact: healthy again (was: %s)", name, table.error)
    return Recheck(name, table.state, STATE_STREAMING, f"every delta file is intact (was: {table.error})")


def auto_recheckable(table: TableInfo) -> bool:
    """Marked for damage by a read or compaction (not by `htap verify data`)."""
    return table.state == STATE_UNHEALTHY and (table.error or "").startswith((DAMAGE_PREFIX, LEGACY_PREFIX))
