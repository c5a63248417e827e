"""What `htap status` reports per HTAP table: state, rows, deltas, safe seq and delay."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from htap.conf import HtapConfig
from htap.connectors.postgres import int_to_lsn
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo


@dataclass(frozen=True)
class TableStatus:
    source: str
    table: str
    state: str
    rows: int | None  # current rows at the max safe seq (None while not readable)
    deltas: int
    row_versions: int
    bytes: int
    max_safe_seq: int | None
    max_safe_lsn: str | None
    delay_s: float | None  # now - the wall clock at which max_safe_seq was known current
    error: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def current_rows(cfg: HtapConfig, store: MetadataStore, table: TableInfo) -> int | None:
    if not table.readable:
        return None
    from htap.pushdown.replica_reader import read_plan
    from htap.rewrite.subplan import Aggregate, PushedSubplan
    import pyarrow as pa

    from htap.replica.snapshot import pin_and_plan

    out = pa.schema([pa.field("n", pa.int64())])
    count = PushedSubplan(aggregates=(Aggregate("count_star"),))
    total = 0
    for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
        for batch in read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan, count, out):
            total += batch.column(0)[0].as_py() if batch.num_rows else 0
    return total


def table_statuses(cfg: HtapConfig) -> list[TableStatus]:
    store = MetadataStore(cfg.metadata)
    try:
        out = []
        now = time.time()
        for t in store.list_tables():
            n, versions, size = store.delta_stats(t.id)
            out.append(
                TableStatus(
                    source=t.source,
                    table=t.qualified_name,
                    state=t.state,
                    rows=current_rows(cfg, store, t),
                    deltas=n,
                    row_versions=versions,
                    bytes=size,
                    max_safe_seq=t.max_safe_seq,
                    max_safe_lsn=None if t.max_safe_seq is None else int_to_lsn(t.max_safe_seq),
                    delay_s=None if t.max_safe_time is None else round(max(0.0, now - t.max_safe_time), 3),
                    error=t.error,
                )
            )
        return out
    finally:
        store.close()
