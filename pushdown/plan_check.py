"""A pushed plan checked before Spark relies on it: parsed, rendered for the replica and for the
source, and run by DuckDB over empty tables of the scans' own types.

The shim asks this (through the driver's bridge, `check-plan`) each time it is about to accept a
pushed part of a query (htap.catalog.bridge; io.sparkhtap.PlanCheck): a plan the reader would not
parse, a renderer that raises, SQL that DuckDB does not bind or that returns another number of
columns — each is a bug of ours, and each is caught here, at planning time, where Spark can still
keep that part itself (a fallback), rather than in a task, where it would fail the query.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from htap import engine
from htap.errors import HtapError
from htap.rewrite import dialects, render
from htap.rewrite.dialects import REPLICA
from htap.rewrite.pushed import PushedPlan

# What a test may ask the check to do, to show that a rendering failure is a fallback
# (tests/test_pushdown_fallbacks.py); never set in use.
FAIL_RENDERING = "render"


def check(store, source, plan_json: str, dialect: str, inject: str | None = None) -> str | None:
    """None when the plan renders and binds, else why not (one line). `store`: the metadata
    store (the scans' tables' schemas); `source`: the scans' source's config; `dialect`: the
    sqlglot dialect of the source's SQL."""
    try:
        plan = PushedPlan.from_json(plan_json)
        tables = []
        for scan in plan.scans:
            schema, name = scan.table.split(".", 1)
            tables.append(store.get_table(source.name, schema, name).arrow_schema)
        if inject == FAIL_RENDERING:
            raise RuntimeError("a rendering failure injected by the test conf spark.htap.test.failPushdown=render")
        _run_on_empty_tables(plan, tables)
        relations = [render.scan_select(scan, exp.to_table(scan.table.split(".", 1)[1])) for scan in plan.scans]
        dialects.for_source(render.render_plan(plan, relations), dialect).sql(dialect)
        return None
    except (HtapError, Exception) as e:  # noqa: BLE001 - every failure is the answer "do not push this"
        return " ".join(f"{type(e).__name__}: {e}".split())[:2000]


def _run_on_empty_tables(plan: PushedPlan, tables: list[pa.Schema]) -> None:
    """The replica's SQL of the plan run by DuckDB over empty tables of the scans' schemas: binds
    every name, type and function, and returns the plan's number of columns."""
    con = engine.cursor()
    try:
        relations = []
        for k, (scan, schema) in enumerate(zip(plan.scans, tables)):
            missing = sorted(scan.referenced() - set(schema.names))
            if missing:
                raise ValueError(f"{scan.table} has no column(s) {missing}")
            con.register(f"__check_{k}", pa.Table.from_batches([], schema=schema))
            relations.append(render.scan_select(scan, exp.to_table(f"__check_{k}")))
        result = con.sql(render.render_plan(plan, relations).sql(REPLICA)).to_arrow_table()
    finally:
        con.close()
    wanted = len(plan.root.columns()) or 1  # a plan of no column selects a constant
    if result.num_columns != wanted:
        raise ValueError(f"the replica's SQL returns {result.num_columns} columns, the plan has {wanted}")
