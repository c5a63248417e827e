"""Failover (source) reads of a large Postgres table: one query vs parallel key ranges.

    python -m bench.source_reads --rows 1000000 --rounds 3

A private Postgres (bench/.work/source_reads/pg) holds one table; two catalogs of one local
Spark session read it with route=source, one with a single range (replica.source_range_rows
above the table's size) and one with --range-rows per range (parallel tasks at one exported
snapshot). Rounds alternate between the two; the figure is the ratio of medians measured in the
same run. Writes bench/results/source_reads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

PORT = 54331
QUERIES = {
    "rows to Spark": "SELECT sum(a + 1), count(b) FROM {t}",  # projection pushed: every row travels
    "pushed aggregate": "SELECT count(*), sum(a), max(b) FROM {t}",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--range-rows", type=int, default=250_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "source_reads")
    args = p.parse_args()

    import psycopg2

    from htap import localpg
    from htap.catalog.shim import spark_session

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    dsn = localpg.start(args.work / "pg", PORT, wal_level="logical")
    try:
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE public.big (id bigint PRIMARY KEY, a bigint NOT NULL, b text)")
            cur.execute(f"INSERT INTO public.big SELECT g, g % 1000, md5(g::text) FROM generate_series(1, {args.rows}) g")
            cur.execute("ANALYZE public.big")
        conn.close()
        catalogs = {}
        for label, range_rows in (("one range", args.rows * 10), ("ranges", args.range_rows)):
            ws = args.work / label.replace(" ", "_")
            ws.mkdir()
            config = ws / "htap.toml"
            htap = [sys.executable, "-m", "htap.app.cli", "--config", str(config)]
            source = f"bench_{ws.name}"
            subprocess.run([*htap, "init", "--dsn", dsn, "--source", source], check=True, capture_output=True)
            lines = [f"source_range_rows = {range_rows}" if line.startswith("source_range_rows =") else line
                     for line in config.read_text().splitlines()]
            config.write_text("\n".join(lines) + "\n")
            subprocess.run([*htap, "tables", "add", "public.big"], check=True, capture_output=True)
            catalogs[label] = (f"c_{ws.name}", config)
        spark = spark_session(*catalogs["one range"], **{"spark.ui.showConsoleProgress": "false"})
        for name, config in catalogs.values():
            spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
            spark.conf.set(f"spark.sql.catalog.{name}.config", str(config))
            spark.conf.set(f"spark.sql.catalog.{name}.route", "source")
        tasks = {label: spark.sql(f"SELECT a FROM {name}.public.big").rdd.getNumPartitions()
                 for label, (name, _) in catalogs.items()}
        times: dict[str, dict[str, list[float]]] = {q: {label: [] for label in catalogs} for q in QUERIES}
        answers: dict[str, set] = {q: set() for q in QUERIES}
        for _ in range(args.rounds):
            for q, sql in QUERIES.items():
                for label, (name, _) in catalogs.items():
                    started = time.perf_counter()
                    answers[q].add(tuple(spark.sql(sql.format(t=f"{name}.public.big")).collect()[0]))
                    times[q][label].append(time.perf_counter() - started)
        assert all(len(a) == 1 for a in answers.values()), f"the two ways disagree: {answers}"
        spark.stop()
    finally:
        localpg.stop(args.work / "pg")
    load = os.getloadavg()
    result = {
        "rows": args.rows, "range_rows": args.range_rows, "tasks": tasks, "rounds": args.rounds,
        "load_average": [round(x, 2) for x in load], "cpus": os.cpu_count(),
        "queries": {
            q: {
                **{f"{label} median s": round(statistics.median(v), 3) for label, v in t.items()},
                "ratio (ranges / one range)": round(statistics.median(t["ranges"]) / statistics.median(t["one range"]), 3),
            }
            for q, t in times.items()
        },
    }
    out = Path(__file__).parent / "results" / "source_reads.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
