"""What one scrape of `htap serve`'s metrics endpoint costs (issue 15), as a ratio against the
cheapest read of the same metadata in the same process.

  python -m bench.metrics [--tables 500] [--deltas 10] [--rounds 30] [--json bench/results/metrics.json]

A SQLite metadata store with `--tables` streaming tables of `--deltas` deltas each (metadata
only: the collector never opens a delta file). Measured, median of `--rounds`:
(a) a scrape: the Prometheus text of the process registry and the HTAP collector (what
    GET /metrics answers), (b) the health decision (GET /health), against (c) the baseline:
    open the store, list its tables, close it (what `htap tables list` reads).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from htap.app.metrics import HtapCollector, health
from htap.conf import parse_config
from htap.connectors.tables import Column
from htap.ingest.health import PHASE_STREAMING, ServiceState
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import encode_schema


def median_s(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def build(root: Path, tables: int, deltas: int):
    cfg = parse_config({"replica": {"warehouse": str(root)},
                        "sources": {"shop": {"kind": "postgres", "dsn": "host=127.0.0.1 dbname=unused"}}}, root / "htap.toml")
    schema = encode_schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
    columns = [Column("id", "bigint", False), Column("v", "text", True)]
    with MetadataStore(cfg.metadata, create=True) as store:
        for i in range(tables):
            t = store.add_table("shop", "public", f"t{i:05d}", columns, ["id"], schema)
            store.start_copy(t.id)
            store.finish_copy(t.id, [NewDelta(t.id, f"shop/t{i}/d{j}.parquet", j, j, 1000, 65536) for j in range(deltas)],
                              0, None)
        store.commit_checkpoint("shop", [], deltas, time.time())
    return cfg


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=500)
    p.add_argument("--deltas", type=int, default=10)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--json", default="bench/results/metrics.json")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="htap-bench-metrics-"))
    try:
        cfg = build(root, args.tables, args.deltas)
        state = ServiceState()
        state.phase("shop", PHASE_STREAMING, "streaming")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(HtapCollector(cfg, state))
        body = generate_latest(REGISTRY) + generate_latest(registry)

        def baseline():
            with MetadataStore(cfg.metadata) as store:
                store.list_tables()

        scrape = median_s(lambda: generate_latest(REGISTRY) + generate_latest(registry), args.rounds)
        check = median_s(lambda: health(cfg, state), args.rounds)
        base = median_s(baseline, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "tables": args.tables, "deltas_per_table": args.deltas, "rounds": args.rounds,
        "scrape_s": scrape, "health_s": check, "list_tables_s": base,
        "scrape_vs_list_tables": scrape / base, "health_vs_list_tables": check / base,
        "scrape_bytes": len(body),
    }
    print(f"{args.tables} tables x {args.deltas} deltas, median of {args.rounds}:")
    print(f"  GET /metrics body   {scrape * 1000:8.1f} ms  {scrape / base:5.1f}x list_tables  ({len(body)} bytes)")
    print(f"  GET /health body    {check * 1000:8.1f} ms  {check / base:5.1f}x list_tables")
    print(f"  baseline list_tables {base * 1000:7.1f} ms")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
