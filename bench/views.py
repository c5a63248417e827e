"""Derived views (issue 31): what keeping a view costs a checkpoint, and what reading it saves a
dashboard query. Ratios against baselines run in the same process, interleaved.

  python -m bench.views [--rows 2000000] [--changes 20000] [--checkpoints 8] [--no-extremes]
                        [--json bench/results/views.json]

(a) maintenance: the same checkpoints (updates that move rows between groups and change the
    summed column, deletes, inserts) written to two copies of one table, one with a view
    `SELECT region, count(*), sum(amount), min(amount), max(qty) ... GROUP BY region` and one
    without; the view's cost is the time its checkpoint took beyond the other's (the base
    deltas' before-images, the group versions, the view's delta; MIN groups that lost their
    minimum recomputed from the table). `--no-extremes`: the view without MIN/MAX.
(b) the dashboard query (its groups' states) read from the view vs computed from the table's
    replica, both at the newest seq, both through DuckDB in this process (not through Spark).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa

from htap.ingest.views import ViewKeeper
from htap.replica.deltas import write_partitioned
from htap.replica.models import Column, encode_schema
from htap.replica.table_reads import rows_at
from htap.replica.view_maintenance import GROUP_KEY, ViewShape, backfill_sql, view_schema
from htap.replica.warehouse import as_warehouse
from htap.rewrite.views import parse_view

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.int64()), ("amount", pa.decimal128(12, 2)), ("qty", pa.int32())])
GROUPS = 200
VIEW_SQL = "SELECT region, count(*), sum(amount){extremes} FROM public.t GROUP BY region"
EXTREMES = ", min(amount), max(qty)"


def progress(msg: str) -> None:
    print(f"[bench.views] {msg}", flush=True)


def _rows(ids: np.ndarray, rng: np.random.Generator) -> list:
    n = len(ids)
    cents = rng.integers(100, 10_000_000, n)
    return [pa.array(ids, pa.int64()), pa.array(rng.integers(0, GROUPS, n), pa.int64()),
            pa.array(cents, pa.int64()).cast(pa.decimal128(19, 0)).cast(pa.decimal128(12, 2)),
            pa.array(rng.integers(0, 1000, n), pa.int32())]


class Copy:
    """One copy of the table (DirectTable-like: buffer -> partitioned deltas -> one commit), with
    a ViewKeeper when it has the view."""

    def __init__(self, root: Path, name: str, rows: int, view_sql: str | None):
        from htap.ingest.buffer import TableBuffer
        from htap.replica.metadata import MetadataStore
        from htap.replica.partitions import encode_bounds

        self.warehouse = as_warehouse(root / name)
        self.store = MetadataStore(root / f"{name}.db", create=True)
        self.source = name
        columns = [Column(f.name, str(f.type), f.name != "id") for f in SCHEMA]
        t = self.store.add_table(name, "public", "t", columns, ["id"], encode_schema(SCHEMA))
        self.store.start_copy(t.id)
        bounds = encode_bounds(pa.array([rows * (i + 1) // 4 for i in range(3)], pa.int64()))
        self.store.finish_copy(t.id, [], 0, bounds)
        self.store.commit_checkpoint(name, [], 0, time.time())
        self.table = self.store.table_by_id(t.id)
        self.buffer = TableBuffer(self.table)
        self.keeper = ViewKeeper(self.warehouse, name) if view_sql else None
        if view_sql:
            definition = parse_view(view_sql, {"public.t": SCHEMA})
            schema = view_schema(ViewShape.of(definition, ["id"]), SCHEMA)
            self.store.add_view(self.table, "by_region", view_sql, definition,
                                [Column(f.name, str(f.type), f.name != GROUP_KEY) for f in schema], [GROUP_KEY],
                                encode_schema(schema))

    def checkpoint(self, seq: int) -> float:
        """Write what is buffered and commit it at `seq` (views kept too); seconds taken."""
        started = time.perf_counter()
        changed = self.keeper.prepare(self.store) if self.keeper else {}
        with ExitStack() as locks:
            live = lambda part: {d.path: d.checksum for d in self.store.deltas(self.table.id, part)}  # noqa: E731
            deltas = write_partitioned(self.warehouse, self.table, self.buffer.drain(), live, locks, self.store,
                                       changed.get(self.table.id))
            kept = self.keeper.write(self.store, changed, [], set(), locks) if self.keeper else None
            if kept and kept.failures:
                raise RuntimeError(f"the view failed: {kept.failures}")
            self.store.commit_checkpoint(self.source, deltas + (kept.deltas if kept else []), seq, time.time(),
                                         [], [])
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--changes", type=int, default=20_000, help="changed rows per checkpoint")
    p.add_argument("--checkpoints", type=int, default=8)
    p.add_argument("--no-extremes", action="store_true", help="a view without MIN/MAX (no recompute)")
    p.add_argument("--json", default="bench/results/views.json")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="htap-bench-views-"))
    rng = np.random.default_rng(7)
    try:
        view_sql = VIEW_SQL.format(extremes="" if args.no_extremes else EXTREMES)
        copies = {"plain": Copy(root, "plain", args.rows, None), "view": Copy(root, "view", args.rows, view_sql)}
        initial = _rows(np.arange(args.rows), rng)
        for c in copies.values():
            c.buffer.append_batch(initial, 1)
            c.checkpoint(1)
            c.checkpoint(2)  # (nothing new: the view is built at 1 and caught up)
        progress(f"{args.rows:,} rows in 4 partitions; view built: {copies['view'].store.list_views()[0].table.state}")
        seconds: dict[str, list[float]] = {"plain": [], "view": []}
        next_id = args.rows
        for k in range(args.checkpoints):
            seq = 3 + k
            moved = rng.choice(next_id, args.changes, replace=False)
            gone = rng.choice(next_id, args.changes // 10, replace=False)
            born = np.arange(next_id, next_id + args.changes // 10)
            next_id += len(born)
            batches = [(_rows(moved, rng), False), (_rows(gone, rng), True), (_rows(born, rng), False)]
            for name in (["plain", "view"] if k % 2 == 0 else ["view", "plain"]):  # interleaved
                c = copies[name]
                for columns, delete in batches:
                    c.buffer.append_batch(columns, seq, delete=delete)
                seconds[name].append(c.checkpoint(seq))
            progress(f"checkpoint {k + 1}/{args.checkpoints}: plain {seconds['plain'][-1]:.3f} s,"
                     f" with the view {seconds['view'][-1]:.3f} s")
        # (b) the dashboard query at the newest seq: the view's groups vs the aggregate of the table
        view = copies["view"]
        info = view.store.list_views()[0]
        table = view.store.table_by_id(view.table.id)
        shape = ViewShape.of(info.definition, ["id"])
        reads: dict[str, list[float]] = {"from_view": [], "from_table": []}
        for _ in range(5):
            started = time.perf_counter()
            with rows_at(view.warehouse, view.store, info.table, table.max_safe_seq,
                         [*shape.groups, *shape.state_columns()], "bench") as (con, rows):
                from_view = con.sql(f"SELECT * FROM ({rows}) ORDER BY region").fetchall()
            reads["from_view"].append(time.perf_counter() - started)
            started = time.perf_counter()
            with rows_at(view.warehouse, view.store, table, table.max_safe_seq, SCHEMA.names, "bench") as (con, rows):
                from_table = con.sql(f"SELECT * FROM ({backfill_sql(shape, f'({rows})')}) ORDER BY region").fetchall()
            reads["from_table"].append(time.perf_counter() - started)
        assert from_view == from_table, "the view differs from its table's aggregate"
        plain, kept = statistics.median(seconds["plain"]), statistics.median(seconds["view"])
        results = {
            "view": view_sql, "rows": args.rows, "changes_per_checkpoint": args.changes + 2 * (args.changes // 10),
            "groups": GROUPS, "checkpoints": args.checkpoints,
            "checkpoint_s_median": {"plain": round(plain, 4), "with_view": round(kept, 4)},
            "view_cost_s_per_checkpoint": round(kept - plain, 4),
            "checkpoint_with_view_over_plain": round(kept / plain, 3),
            "dashboard_read_s_median": {k: round(statistics.median(v), 4) for k, v in reads.items()},
            "dashboard_from_view_over_from_table": round(statistics.median(reads["from_view"])
                                                         / statistics.median(reads["from_table"]), 4),
            "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
