"""Which deltas a read at one seq needs: the read plan a query's snapshot resolves to."""

from __future__ import annotations

from dataclasses import dataclass

from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo


@dataclass(frozen=True)
class ReadPlan:
    seq: int
    delta_paths: tuple[str, ...]
    floor: int | None  # versions below it were truncated away
    partial: bool  # some version lacks columns (partial update): reads must fill them


def plan_read(store: MetadataStore, table: TableInfo, seq: int) -> ReadPlan:
    """Deltas that can hold a version visible at `seq`, pruned by seq range and truncation."""
    floor = store.truncated_at(table.id, seq)
    deltas = [d for d in store.deltas(table.id) if d.min_seq <= seq and (floor is None or d.max_seq >= floor)]
    return ReadPlan(
        seq=seq,
        delta_paths=tuple(d.path for d in deltas),
        floor=floor,
        partial=any(d.partial_rows for d in deltas),
    )
