"""Change feed benchmark (issue 29): how soon a commit reaches a micro-batch, and how fast a
stream catches up.

  python -m bench.change_feed [--rate 200] [--seconds 30] [--rows 200000] [--backlog 100000]

A private Postgres (bench/.work/change_feed/pg, logical WAL) holds one table that `htap serve`
replicates. One local Spark session runs a change-feed stream (`readChangeFeed`, trigger
every 0.5 s, `foreachBatch`) while a writer commits single-row updates at --rate per second, each
carrying a counter whose commit time the writer notes. Printed, with the baselines measured in
the same run:
- latency: p50/p99 of (time the micro-batch holding a change reached foreachBatch - time the
  change committed), next to the replica's own commit-to-readable p50/p99 (the source's WAL
  position sampled every 50 ms until the max safe seq passes it): the ratio is what the feed adds;
- throughput: a backlog of --backlog row updates (one transaction) read by the stream from its
  checkpoint (availableNow), in changes/s, next to a batch read of the table's --rows rows through
  the same data source (rows/s).
Writes bench/results/change_feed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psycopg2

from htap.seq import lsn_to_int

DB = "htap_cf_bench"
SOURCE = "cfbench"


def progress(msg: str) -> None:
    print(f"[bench.change_feed] {msg}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("bench/.work/change_feed"))
    p.add_argument("--port", type=int, default=55439, help="the private Postgres server's port")
    p.add_argument("--rate", type=int, default=200, help="single-row update transactions per second")
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--backlog", type=int, default=100_000)
    p.add_argument("--json", default="bench/results/change_feed.json")
    args = p.parse_args(argv)
    from htap import localpg

    localpg.stop(args.work / "pg")  # a previous run's, if it was interrupted
    admin = psycopg2.connect(localpg.start(args.work / "pg", args.port, wal_level="logical"))
    admin.autocommit = True
    cur = admin.cursor()
    cur.execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'htap_{SOURCE}'"
                " AND NOT active")
    cur.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    cur.execute(f"CREATE DATABASE {DB}")
    dsn = f"host=127.0.0.1 port={args.port} user=postgres dbname={DB}"
    src = psycopg2.connect(dsn)
    src.autocommit = True
    scur = src.cursor()
    scur.execute("CREATE TABLE events (id bigint PRIMARY KEY, v bigint NOT NULL, pad text)")
    scur.execute(f"INSERT INTO events SELECT g, 0, md5(g::text) FROM generate_series(1, {args.rows}) g")

    work = Path(tempfile.mkdtemp(prefix="htap-cf-"))
    config = work / "htap.toml"
    htap = [sys.executable, "-m", "htap.app.cli", "--config", str(config)]
    subprocess.run([*htap, "init", "--dsn", dsn, "--source", SOURCE], check=True, capture_output=True)
    subprocess.run([*htap, "tables", "add", "public.events"], check=True, capture_output=True)
    log = open(work / "serve.log", "wb")
    service = subprocess.Popen([*htap, "serve"], stdout=log, stderr=log)

    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    store = MetadataStore(load_config(config).metadata)

    def safe() -> int:
        t = store.get_table(SOURCE, "public", "events")
        return t.max_safe_seq or 0 if t.readable else 0

    results: dict = {"rate_tps": args.rate, "seconds": args.seconds, "rows": args.rows, "backlog": args.backlog,
                     "load_average": list(os.getloadavg()), "cpus": os.cpu_count()}
    spark = None
    try:
        while not safe():
            time.sleep(0.2)
        progress(f"initial copy of {args.rows} rows done")
        from htap.catalog.shim import spark_session

        spark = spark_session("unused", config, **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
        spark.sparkContext.setLogLevel("ERROR")
        feed = {"config": str(config), "table": "public.events", "readChangeFeed": "true"}

        # Baseline: the table's rows through the same data source (a snapshot read; the second).
        spark.read.format("htap").options(**feed, startingVersion="snapshot").load().count()
        t0 = time.perf_counter()
        n = spark.read.format("htap").options(**feed, startingVersion="snapshot").load().count()
        snapshot_rows_s = n / (time.perf_counter() - t0)
        progress(f"snapshot read: {n} rows, {snapshot_rows_s:,.0f} rows/s")

        committed: dict[int, float] = {}  # counter -> commit wall time
        arrivals: list[float] = []

        def on_batch(df, _batch_id) -> None:
            now = time.time()
            for row in df.where("_change_type IN ('update_postimage', 'insert')").select("v").collect():
                if row.v in committed:
                    arrivals.append(now - committed[row.v])

        checkpoint = work / "stream-checkpoint"
        query = (spark.readStream.format("htap").options(**feed, startingVersion="latest").load()
                 .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="0.5 seconds").start())
        time.sleep(2)  # the first (empty) micro-batch

        visible: list[float] = []
        samples: list[tuple[float, int]] = []
        stop = threading.Event()

        def writer() -> None:
            conn = psycopg2.connect(dsn)
            c = conn.cursor()
            counter, began = 0, time.time()
            while time.time() - began < args.seconds:
                counter += 1
                c.execute("UPDATE events SET v = %s WHERE id = %s", (counter, 1 + counter % args.rows))
                conn.commit()
                committed[counter] = time.time()
                delay = began + counter / args.rate - time.time()
                if delay > 0:
                    time.sleep(delay)
            conn.close()
            stop.set()

        threading.Thread(target=writer, daemon=True).start()
        progress(f"writing {args.rate} updates/s for {args.seconds} s while the stream runs")
        while not stop.is_set() or samples:
            now = time.time()
            if not stop.is_set():
                scur.execute("SELECT pg_current_wal_lsn()")
                samples.append((now, lsn_to_int(scur.fetchone()[0])))
            s = safe()
            while samples and samples[0][1] - 1 <= s:
                visible.append(now - samples.pop(0)[0])
            time.sleep(0.05)
        scur.execute("SELECT max(v) FROM events")
        last = scur.fetchone()[0]
        deadline = time.time() + 120
        while len(arrivals) < len(committed) and time.time() < deadline:
            time.sleep(0.2)
        query.stop()
        results["latency"] = {
            "feed_p50_s": float(np.percentile(arrivals, 50)), "feed_p99_s": float(np.percentile(arrivals, 99)),
            "replica_visible_p50_s": float(np.percentile(visible, 50)),
            "replica_visible_p99_s": float(np.percentile(visible, 99)),
            "changes": len(arrivals), "committed": len(committed), "last_counter": last,
        }
        lat = results["latency"]
        lat["feed_over_visible_p50"] = lat["feed_p50_s"] / lat["replica_visible_p50_s"]
        progress(f"commit-to-micro-batch p50 {lat['feed_p50_s']:.3f} s, p99 {lat['feed_p99_s']:.3f} s; "
                 f"commit-to-readable p50 {lat['replica_visible_p50_s']:.3f} s, p99 {lat['replica_visible_p99_s']:.3f} s "
                 f"(feed / readable p50: {lat['feed_over_visible_p50']:.2f}x); {len(arrivals)} of {len(committed)} changes seen")

        # Throughput: a backlog read from the checkpoint.
        scur.execute(f"UPDATE events SET v = -v WHERE id <= {args.backlog}")
        scur.execute("SELECT pg_current_wal_lsn()")
        target = lsn_to_int(scur.fetchone()[0]) - 1
        while safe() < target:
            time.sleep(0.1)
        counted = []
        t0 = time.perf_counter()
        (spark.readStream.format("htap").options(**feed, startingVersion="latest").load()
         .writeStream.foreachBatch(lambda df, _i: counted.append(df.count()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start().awaitTermination())
        took = time.perf_counter() - t0
        changes = sum(counted)
        results["throughput"] = {"changes": changes, "seconds": took, "changes_per_s": changes / took,
                                 "snapshot_rows_per_s": snapshot_rows_s,
                                 "changes_over_snapshot_rows": (changes / took) / snapshot_rows_s}
        progress(f"backlog: {changes} change rows in {took:.2f} s = {changes / took:,.0f} changes/s "
                 f"({results['throughput']['changes_over_snapshot_rows']:.2f}x the snapshot read's rows/s)")
    finally:
        if spark is not None:
            spark.stop()
        service.terminate()
        service.wait(timeout=60)
        store.close()
        admin.close()
        src.close()
        localpg.stop(args.work / "pg")
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
