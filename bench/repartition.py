"""Online repartitioning cost (issue 13): a split and a merge of a 1M-row partition.

  python -m bench.repartition [--rows 1000000] [--json bench/results/repartition.json]

The table of bench.storage (`--rows` rows at seq 1, then 10 deltas updating 2 % of the rows each)
in ONE partition; then, timed (htap.replica.repartition.repartition, as the compaction thread
runs it, no concurrent ingest):
(a) split of the partition as ingested (11 deltas, deletion vectors) into two;
(b) merge of the two halves back into one (one delta each);
(c) split of that compacted partition (one delta) into two.
Each folds the partition's versions to the rows live at the max safe seq, writes the new
partitions (zstd Parquet, fsynced) and commits the new layout. Reported as live rows per second;
the machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.storage import build, progress
from htap.replica.repartition import Change, repartition


def timed(what: str, warehouse, store, table_id: int, change: Change, partition_rows: int) -> dict:
    t0 = time.perf_counter()
    outcome = repartition(warehouse, store, table_id, change, partition_rows)
    seconds = time.perf_counter() - t0
    if outcome is None:
        raise SystemExit(f"{what}: the repartition did not happen")
    table = store.table_by_id(table_id)
    result = {"seconds": round(seconds, 3), "live_rows": outcome.rows, "rows_per_s": round(outcome.rows / seconds),
              "partitions_after": len(table.layout.ids), "load_avg_1m": round(os.getloadavg()[0], 2)}
    progress(f"{what}: {outcome.rows} rows in {seconds:.2f} s = {outcome.rows / seconds:,.0f} rows/s "
             f"(load {os.getloadavg()[0]:.1f})")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--json", default="bench/results/repartition.json")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="htap-bench-repartition-"))
    try:
        load_before = os.getloadavg()
        progress(f"building {args.rows} rows in one partition, 10 update deltas (load {load_before[0]:.1f})")
        store, table, warehouse = build(root, args.rows, args.rows, np.random.default_rng(13))
        half = args.rows // 2 + 1  # a split is due above 1.5 x partition_rows: ceil(rows / half) = 2 partitions
        results = {"rows": args.rows, "load_avg_before": [round(x, 2) for x in load_before]}
        results["split_as_ingested"] = timed("split of the partition as ingested (11 deltas)", warehouse, store,
                                             table.id, Change("split", table.layout.ids, "bench"), half)
        ids = store.table_by_id(table.id).layout.ids
        results["merge"] = timed("merge of the two halves", warehouse, store, table.id, Change("merge", ids, "bench"), half)
        ids = store.table_by_id(table.id).layout.ids
        results["split_compacted"] = timed("split of the merged partition (1 delta)", warehouse, store, table.id,
                                           Change("split", ids, "bench"), half)
        results["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
