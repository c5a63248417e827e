"""`htap verify data` for derived views (issue 31): each view of a checked table, read at the
snapshot's seq, must equal the view's aggregate computed afresh over its table's replica (joined
with its dimensions') at that same seq (htap.replica.view_maintenance.backfill_sql), group by group and state by state.

Together with the table's own check (its replica equals the source at the snapshot), that proves
the view equals the aggregate of the source at the snapshot — with one engine (DuckDB) computing
both sides, so no dialect's grouping or collation enters the comparison."""

from __future__ import annotations

import time

import duckdb

from htap.conf import HtapConfig
from htap.errors import HtapError
from htap.replica.merge import ident
from htap.replica.metadata import MetadataStore, ViewInfo
from htap.replica.models import TableInfo
from htap.replica.read_plans import queryable_window
from htap.replica.table_reads import read_at
from htap.replica.view_bases import ViewBase
from htap.replica.view_maintenance import ROWS, ViewShape, backfill_sql
from htap.replica.warehouse import open_warehouse
from htap.verify.snapshot import VerifyError, wait_for_seq

HOLDER = "htap verify data"


def verify_views(cfg: HtapConfig, store: MetadataStore, tables: list[TableInfo], seq: int, wait_s: float,
                 max_report_rows: int) -> list[dict]:
    """A report per view of `tables` at `seq`."""
    return [_check(cfg, store, view, base, seq, wait_s, max_report_rows)
            for base in tables for view in store.views_of(base.id)]


def _check(cfg: HtapConfig, store: MetadataStore, view: ViewInfo, base: TableInfo, seq: int, wait_s: float,
           max_report_rows: int) -> dict:
    started = time.monotonic()
    report = {"view": view.table.qualified_name, "table": base.qualified_name, "seq": seq, "ok": False, "error": None,
              "groups": 0, "missing": [], "extra": [], "different": []}
    try:
        table = wait_for_seq(store, view.table, seq, wait_s)
        window = queryable_window(store, table, cfg.window_s)
        if window is None or not window.min_seq <= seq <= window.max_seq:
            raise VerifyError(f"{table.qualified_name}: seq {seq} is outside its queryable window {window}")
        shape = ViewShape.of(view.definition, base.key)
        states = [*shape.groups, *shape.state_columns()]
        warehouse = open_warehouse(cfg)
        stored = read_at(warehouse, store, table, seq, states, HOLDER)
        with ViewBase.of(store, view).rows_at(warehouse, store, seq, shape, HOLDER) as (con, rows):
            con.register("__stored", stored)
            found = con.sql(_differences_sql(shape, backfill_sql(shape, f"({rows})"))).to_arrow_table().to_pylist()
        report["groups"] = stored.num_rows
        for row in found:
            group = {c: row[c] for c in shape.groups}
            kind = "missing" if row["__stored"] is None else "extra" if row["__expected"] is None else "different"
            if len(report[kind]) < max_report_rows:
                report[kind].append(group if kind != "different" else {"group": group, "states": row["__states"]})
            report[f"{kind}_count"] = report.get(f"{kind}_count", 0) + 1
        report["ok"] = not found
    except (HtapError, duckdb.Error) as e:  # this view's check fails alone, saying why
        report["error"] = str(e)
    for kind in ("missing", "extra", "different"):
        report.setdefault(f"{kind}_count", 0)
    report["duration_s"] = round(time.monotonic() - started, 3)
    return report


def _differences_sql(shape: ViewShape, expected: str) -> str:
    """The groups where the stored view (`__stored`) and the aggregate computed afresh differ:
    missing from the view, extra in it, or a state that differs (the names of those)."""
    same = " AND ".join(f"e.{ident(c)} IS NOT DISTINCT FROM s.{ident(c)}" for c in shape.groups) or "true"
    groups = ", ".join(f"coalesce(e.{ident(c)}, s.{ident(c)}) AS {ident(c)}" for c in shape.groups)
    differs = [f"CASE WHEN e.{ident(c)} IS DISTINCT FROM s.{ident(c)} THEN '{c}' END" for c in shape.state_columns()]
    return f"""
        SELECT * FROM (
            SELECT {groups + ', ' if groups else ''}e.{ident(ROWS)} AS __expected, s.{ident(ROWS)} AS __stored,
                   list_filter([{', '.join(differs)}], lambda x: x IS NOT NULL) AS __states
            FROM ({expected}) AS e FULL JOIN __stored AS s ON {same}
        ) WHERE __expected IS NULL OR __stored IS NULL OR len(__states) > 0
    """
