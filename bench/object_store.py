"""Object-store warehouse benchmark (issue 15): ratios measured in one run.

  python -m bench.object_store [--rows 2000000] [--endpoint http://host:port] [--json bench/results/object_store.json]

The same replica table (a base of --rows rows plus 10 deltas updating 2 % each, with deletion
vectors; bench.storage.build) is written once to a local warehouse and once to an S3 bucket
(moto's server started in this process, or --endpoint), then read as the executors read it: a
scan + aggregate of every partition at the max safe seq (read_plan), best of --repeat runs.

- local: the local warehouse.
- S3 cold: the cache emptied before each run: every delta and sidecar is downloaded, hashed
  and verified, then read.
- S3 warm: the files are in the cache and this process verified them already (an executor's
  second query over the same deltas).
- S3 warm, new process: in the cache, but not yet verified by this process (a fresh executor):
  each file is hashed once.

Each round runs every variant once (the warm ones after the cold one filled the cache); the
best of --repeat rounds counts. Ratios: cold / warm, S3 warm / local, S3 cold / local. A local moto server answers from memory
over loopback: against a real bucket the cold reads pay the network's latency and bandwidth,
so the cold ratios here are lower bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.storage import AGG, AGG_OUT, SCHEMA, build, merged, progress, same
from htap.conf import ObjectStoreConfig
from htap.pushdown.replica_reader import read_plan
from htap.replica.read_plans import plan_reads
from htap.replica.warehouse import LocalWarehouse, ObjectStoreWarehouse


def scan(store, table, warehouse) -> pa.Table:
    out = []
    for plan in plan_reads(table, store.deltas(table.id), table.max_safe_seq, None):
        out += list(read_plan(warehouse, "bench", SCHEMA, ["id"], plan, AGG, AGG_OUT))
    return pa.Table.from_batches(out, AGG_OUT)


def timed(fn, repeat: int, before=None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--partition-rows", type=int, default=500_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--endpoint", help="an S3-compatible endpoint (default: moto's server, started here)")
    p.add_argument("--json", default="bench/results/object_store.json")
    args = p.parse_args(argv)

    server = None
    endpoint = args.endpoint
    if endpoint is None:
        import logging

        import socket

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        endpoint = f"http://127.0.0.1:{port}"
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    root = Path(tempfile.mkdtemp(prefix="htap-bench-s3-"))
    try:
        opts = ObjectStoreConfig(endpoint=endpoint, access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "bench"),
                                 secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "bench"),
                                 cache_dir=root / "cache", cache_bytes=8 << 30)
        location = f"s3://htap-bench-{uuid.uuid4().hex[:8]}/replica"
        s3 = ObjectStoreWarehouse(location, opts)
        s3.create()
        local = LocalWarehouse(root / "local" / "warehouse")
        progress(f"writing {args.rows} rows + 10 deltas to a local warehouse and to {location} at {endpoint}")
        t0 = time.perf_counter()
        store_l, table_l, _ = build(root / "local", args.rows, args.partition_rows, np.random.default_rng(7), local)
        write_local = time.perf_counter() - t0
        (root / "s3").mkdir()
        t0 = time.perf_counter()
        store_s, table_s, _ = build(root / "s3", args.rows, args.partition_rows, np.random.default_rng(7), s3)
        write_s3 = time.perf_counter() - t0
        deltas = store_s.deltas(table_s.id)
        size = sum(d.bytes for d in deltas)
        progress(f"{len(deltas)} deltas, {size / 1e6:.1f} MB; written in {write_local:.1f} s locally, {write_s3:.1f} s to S3")

        want = merged(scan(store_l, table_l, local))
        assert same(merged(scan(store_s, table_s, s3)), want), "the S3 warehouse's answer differs from the local one"

        def empty_cache() -> None:
            shutil.rmtree(s3.cache.files, ignore_errors=True)
            s3.cache._verified.clear()

        def forget_verified() -> None:
            s3.cache._verified.clear()

        # Interleaved rounds (each variant once per round, best of the rounds): load drift on a
        # shared machine then affects every variant alike.
        variants = {
            "local": (lambda: scan(store_l, table_l, local), None),
            "cold": (lambda: scan(store_s, table_s, s3), empty_cache),
            "warm": (lambda: scan(store_s, table_s, s3), None),
            "fresh": (lambda: scan(store_s, table_s, s3), forget_verified),
        }
        best = {name: float("inf") for name in variants}
        for _ in range(args.repeat):
            for name, (fn, before) in variants.items():
                best[name] = min(best[name], timed(fn, 1, before))
        local_s, cold_s, warm_s, fresh_s = best["local"], best["cold"], best["warm"], best["fresh"]
        result = {
            "rows": args.rows, "deltas": len(deltas), "bytes": size, "endpoint": "moto (local)" if server else endpoint,
            "load_avg": os.getloadavg(), "local_s": local_s, "s3_cold_s": cold_s, "s3_warm_s": warm_s,
            "s3_warm_new_process_s": fresh_s, "write_local_s": write_local, "write_s3_s": write_s3,
            "cold_over_warm": cold_s / warm_s, "warm_over_local": warm_s / local_s, "cold_over_local": cold_s / local_s,
            "fresh_over_warm": fresh_s / warm_s, "write_s3_over_local": write_s3 / write_local,
        }
        print()
        print(f"scan + aggregate of {args.rows} rows in {len(deltas)} deltas ({size / 1e6:.1f} MB), best of {args.repeat},"
              f" load {os.getloadavg()[0]:.1f}")
        print(f"  local warehouse              {local_s * 1000:8.0f} ms")
        print(f"  S3, cold cache               {cold_s * 1000:8.0f} ms   {cold_s / local_s:5.2f}x local")
        print(f"  S3, warm cache               {warm_s * 1000:8.0f} ms   {warm_s / local_s:5.2f}x local")
        print(f"  S3, warm cache, new process  {fresh_s * 1000:8.0f} ms   {fresh_s / local_s:5.2f}x local")
        print(f"  cold / warm                  {cold_s / warm_s:8.2f}x")
        print(f"  writing (10 checkpoints + base): S3 {write_s3:.1f} s vs local {write_local:.1f} s ({write_s3 / write_local:.2f}x)")
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
