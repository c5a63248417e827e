"""The first checkpoint after a restart, with and without the key indexes stored on disk (issue 13).

  python -m bench.keyindex_restart [--rows 3000000] [--partition-rows 1000000] [--rounds 3]

Builds a replica table as bench.storage does (a base of `--rows` rows in partitions of
`--partition-rows`, then 10 deltas updating 2 % of the rows each), then, in turn and `--rounds`
times over, simulates a restart and times the first checkpoint after it (a few thousand updated
rows spread over every partition, written as the service's checkpointer writes them: partition
locks, deletion vectors, commit):
- rebuilt: no stored index (what every restart did before the indexes were stored): each
  partition's index is built from its deltas inside that checkpoint;
- loaded: the indexes stored by the last process (htap.replica.keyindex.flush, as a clean stop
  does) are read back and caught up with the deltas added since;
- caught up: stored, then every partition's deltas but its base merged (a compaction after the
  last store), then a crash: the stored indexes cover deltas no longer live, drop their
  entries, read the merged delta and look the dropped keys up again in the base;
- in memory: no restart (the same checkpoint with the process's indexes current), the floor.
Also reports what storing them costs (off the hot path: the service's background writer).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from bench.storage import build, live, rows
from htap.ingest.buffer import TableBuffer
from htap.replica import keyindex, keyindex_file
from htap.replica.compaction import merge
from htap.replica.deltas import partition_dir, write_partitioned
from htap.replica.warehouse import as_warehouse


def progress(msg: str) -> None:
    print(f"[bench.keyindex_restart] {msg}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=3_000_000)
    p.add_argument("--partition-rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--changes", type=int, default=3000, help="updated rows in the first checkpoint")
    p.add_argument("--json", default="bench/results/keyindex_restart.json")
    args = p.parse_args(argv)
    rng = np.random.default_rng(7)
    root = Path(tempfile.mkdtemp(prefix="htap-kix-"))
    results: dict = {"rows": args.rows, "partition_rows": args.partition_rows, "changes": args.changes}
    try:
        progress(f"building {args.rows} rows")
        store, table, warehouse = build(root, args.rows, args.partition_rows, rng)
        folders = [as_warehouse(warehouse).lock_dir(partition_dir(table, p)) for p in table.layout.ids]

        def checkpoint() -> float:
            current = store.table_by_id(table.id)
            buf = TableBuffer(current)
            seq = current.max_safe_seq + 1
            src = rows(np.sort(rng.choice(args.rows, args.changes, replace=False)), rng)
            for i, r, a, q in zip(*(src.column(n).to_pylist() for n in src.column_names)):
                buf.upsert([i, r, a, q], seq)
            t0 = time.perf_counter()
            with ExitStack() as locks:
                deltas = write_partitioned(warehouse, current, buf.drain(), live(store, current), locks, store)
                store.commit_checkpoint("bench", deltas, seq, time.time())
            return time.perf_counter() - t0

        stores = []

        def restart(mode: str) -> None:
            if mode == "in memory":
                return
            if mode in ("loaded", "caught up"):
                t0 = time.perf_counter()
                keyindex.flush()  # as a clean stop does, or the background writer before a crash
                stores.append(time.perf_counter() - t0)
                if mode == "caught up":
                    current = store.table_by_id(table.id)
                    for part in current.layout.ids:
                        deltas = sorted(store.deltas(table.id, part), key=lambda d: d.rows)
                        merge(warehouse, store, current, part, deltas[:-1], None, "minor")
                    # then a crash: the indexes the merges swapped in place are lost unstored
            else:
                for f in folders:
                    keyindex_file.remove(f)
            keyindex.forget()

        checkpoint()  # every partition's index current in this process
        times: dict[str, list[float]] = {"rebuilt": [], "loaded": [], "caught up": [], "in memory": []}
        for r in range(args.rounds):
            for mode in times:
                restart(mode)
                times[mode].append(checkpoint())
                progress(f"round {r + 1}: first checkpoint after a restart, index {mode}: {times[mode][-1]:.3f} s")
        size = sum(keyindex_file.path_of(f).stat().st_size for f in folders if keyindex_file.path_of(f).exists())
        for mode, ts in times.items():
            results[mode] = {"median_s": statistics.median(ts), "min_s": min(ts), "runs": ts}
        results["ratio_median"] = results["rebuilt"]["median_s"] / results["loaded"]["median_s"]
        results["ratio_caught_up_median"] = results["rebuilt"]["median_s"] / results["caught up"]["median_s"]
        results["store"] = {"median_s": statistics.median(stores), "bytes": size, "partitions": len(folders)}
    finally:
        keyindex.forget()
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"first checkpoint after a restart ({args.rows} rows, {len(folders)} partitions, {args.changes} changes):")
    for label, mode in (("index rebuilt from the deltas", "rebuilt"), ("stored index read back", "loaded"),
                        ("stored, then compacted, caught up", "caught up"),
                        ("no restart (indexes in memory)", "in memory")):
        print(f"  {label + ':':<34} median {results[mode]['median_s']:.3f} s, min {results[mode]['min_s']:.3f} s")
    print(f"  ratio (rebuilt / loaded, medians): {results['ratio_median']:.1f}x;"
          f" rebuilt / caught up: {results['ratio_caught_up_median']:.1f}x")
    print(f"  storing every partition's index (background / at a clean stop): median"
          f" {results['store']['median_s']:.3f} s, {results['store']['bytes'] / 1e6:.0f} MB")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
