"""TPC-H through Spark SQL: spark-htap's replica vs Spark's JDBC catalog vs a static Parquet copy.

    python -m bench.tpch --sf 0.1                    # all 22 queries, best of 3
    python -m bench.tpch --sf 1                      # the headline run, best of 1
    python -m bench.tpch --sf 0.01 --queries 1,6     # smoke run, about a minute

Generates TPC-H data with tpchgen-cli, loads it into Postgres (schema `tpch`), exports a Parquet
copy, builds a fresh spark-htap replica (`htap init`, `htap tables add`, `htap serve`), then runs
the same query text through the three systems in one Spark session, checks the results are
equal, prints a table and writes bench/results/tpch-sf<sf>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench import data
from bench.compare import compare, order_note
from bench.data import log
from bench.queries import is_ordered, parse_selection, query_text
from bench.runners import (
    SYSTEMS,
    JdbcSettings,
    Replica,
    SystemRun,
    geomean,
    htap_table_states,
    postmaster_pid,
    duckdb_connection,
    register_parquet,
    run_queries,
    spark_session,
    table_refs,
)

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PRIVATE_PG_PORT = 54330
LABEL = {"htap": "(a) spark-htap replica", "jdbc": "(b) Spark JDBC catalog",
         "jdbc-join": "(b') Spark JDBC catalog with Spark's join pushdown on", "parquet": "(c) static Parquet",
         "duckdb": "(d) DuckDB over the Parquet copy"}
JDBC_SYSTEMS = ("jdbc", "jdbc-join")  # b = the faster of the two per query, when both ran


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.tpch",
        description="TPC-H through Spark SQL on (a) spark-htap's replica, (b) Spark's JDBC catalog on the same "
        "Postgres, (c) a static Parquet copy; results checked equal; per-query times, geometric-mean "
        "ratios and Postgres server CPU seconds per run.",
    )
    p.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1; 0.1 for a quick run)")
    p.add_argument("--queries", default="all", help="'all' (default) or e.g. '1,6,10-12'")
    p.add_argument("--repeats", type=int, help="runs per query, the best counts (default 3 below SF 1, else 1)")
    p.add_argument("--systems", default="parquet,htap,jdbc,jdbc-join,duckdb",
                   help="systems to run, in this order (default parquet,htap,jdbc,jdbc-join,duckdb; jdbc-join is JDBC"
                        " with Spark's join pushdown on, and b in the ratios is the faster JDBC run per query)")
    p.add_argument("--dsn", default=os.environ.get("HTAP_BENCH_DSN", DEFAULT_DSN),
                   help=f"libpq DSN of the Postgres to load and replicate (default $HTAP_BENCH_DSN or '{DEFAULT_DSN}')")
    p.add_argument("--private-postgres", action="store_true",
                   help="run a private Postgres cluster under <work>/pg (port 54330) instead of --dsn, so that its "
                        "CPU seconds count this benchmark only, not other work on a shared server")
    p.add_argument("--reload", action="store_true", help="regenerate and reload the data even if schema tpch has this SF")
    p.add_argument("--jdbc-partitions", type=int, default=4,
                   help="JDBC numPartitions for every table but nation and region (default 4; 1 = unpartitioned)")
    p.add_argument("--jdbc-fetch-size", type=int, default=10000, help="JDBC fetchsize (default 10000)")
    p.add_argument("--jdbc-join-pushdown", action="store_true",
                   help="run system jdbc with spark.sql.optimizer.datasourceV2JoinPushdown=true as well (off by default"
                        " in Spark; system jdbc-join always has it on)")
    p.add_argument("--no-subtree-pushdown", action="store_true",
                   help="set spark.htap.wholeQueryPushdown=false: the replica without whole-subtree pushdown (to compare)")
    p.add_argument("--driver-memory", default="6g", help="spark.driver.memory (default 6g)")
    p.add_argument("--master", default="local[2]",
                   help="Spark master (default local[2]; e.g. local-cluster[2,1,4096]: two executors of one core and"
                        " 4 GiB, each task's DuckDB on its executor's core — set spark.executor.cores to match with"
                        " --conf)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the session, repeatable (e.g. spark.htap.splitSubtrees=false)")
    p.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before a query run is cancelled (default 1800)")
    p.add_argument("--copy-timeout", type=float, default=7200, help="seconds to wait for the replica's initial copy")
    p.add_argument("--work", type=Path, default=BENCH_DIR / ".work", help="scratch folder (default bench/.work)")
    p.add_argument("--note", default="", help="free text recorded in the results (e.g. which build was measured)")
    p.add_argument("--out", type=Path, help="results JSON (default bench/results/tpch-sf<sf>.json)")
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or not args.systems:
        p.error(f"unknown system(s) {unknown}; choose from {', '.join(SYSTEMS)}")
    try:
        args.queries = parse_selection(args.queries)
    except ValueError as e:
        p.error(str(e))
    if args.repeats is None:
        args.repeats = 3 if args.sf < 1 else 1
    if args.sf <= 0 or args.repeats < 1:
        p.error("--sf and --repeats must be positive")
    bad = [c for c in args.conf if "=" not in c or not c.split("=", 1)[0].strip()]
    if bad:
        p.error(f"--conf takes KEY=VALUE, not {bad[0]!r}")
    args.out = args.out or BENCH_DIR / "results" / f"tpch-sf{args.sf:g}.json"
    return args


def machine_info(dsn: str) -> dict:
    import duckdb
    import pyspark

    import htap

    info = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "duckdb": duckdb.__version__,
        "htap_package": str(Path(htap.__file__).parent),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(next(line.split()[1] for line in f if line.startswith("MemTotal"))) / 2**20, 1)
    except OSError:
        pass
    conn = data.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version()")
            info["postgres"] = cur.fetchone()[0]
            for setting in ("shared_buffers", "work_mem", "max_parallel_workers_per_gather"):
                cur.execute(f"SHOW {setting}")
                info[f"postgres_{setting}"] = cur.fetchone()[0]
    finally:
        conn.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH_DIR, capture_output=True, text=True)
    info["git_commit"] = commit.stdout.strip() or None
    return info


def summarize(args, runs: dict[str, SystemRun]) -> tuple[list[dict], dict]:
    """Per-query records (times, check against the reference) and the geometric means."""
    per_query = []
    ratios: dict[str, list[float]] = {"htap/jdbc": [], "htap/parquet": [], "htap/duckdb": []}
    used: dict[str, list[int]] = {"htap/jdbc": [], "htap/parquet": [], "htap/duckdb": []}
    for q in args.queries:
        record: dict = {"query": q, "ordered": is_ordered(q)}
        for system, run in runs.items():
            r = run.queries[q]
            record[system] = {
                "best_s": None if r.best is None else round(r.best, 4),
                "runs_s": [round(s, 4) for s in r.seconds],
                "rows": None if r.rows is None else len(r.rows),
                "schema": r.schema,
                "error": r.error,
                **({"error_detail": r.error_detail} if r.error else {}),
            }
        # The reference result: the static Parquet copy when it ran, else the first that succeeded.
        order = ["parquet"] + [s for s in runs if s != "parquet"]
        reference = next((s for s in order if s in runs and runs[s].queries[q].error is None), None)
        checks = {}
        for system, run in runs.items():
            r = run.queries[q]
            if r.error is not None:
                checks[system] = "failed"
            elif system == reference:
                checks[system] = "reference"
            else:
                expected = runs[reference].queries[q].rows
                diff = compare(expected, r.rows, record["ordered"])
                if diff:
                    checks[system] = f"MISMATCH: {diff}"
                else:
                    note = order_note(expected, r.rows) if record["ordered"] else None
                    checks[system] = "equal" + (f" ({note})" if note else "")
        record["check"] = checks
        for pair in ratios:
            a, b = pair.split("/")
            if b == "jdbc":  # JDBC's faster configuration for this query, among those that ran and agreed
                fastest = [(runs[s].queries[q].best, s) for s in JDBC_SYSTEMS if s in runs
                           and runs[s].queries[q].best and not checks[s].startswith("MISMATCH")]
                b = min(fastest)[1] if fastest else "jdbc"
                if "jdbc-join" in runs:
                    record["jdbc_fastest"] = b
            if a in runs and b in runs:
                ta, tb = runs[a].queries[q].best, runs[b].queries[q].best
                ok = not checks[a].startswith("MISMATCH") and not checks[b].startswith("MISMATCH")
                if ta and tb and ok:
                    record["ratio_" + pair.replace("/", "_")] = round(ta / tb, 4)
                    ratios[pair].append(ta / tb)
                    used[pair].append(q)
        per_query.append(record)
    geo = {pair: {"geomean": None if geomean(v) is None else round(geomean(v), 4), "queries": used[pair]}
           for pair, v in ratios.items()}
    return per_query, geo


def _fmt(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


def print_table(args, runs: dict[str, SystemRun], per_query: list[dict], geo: dict) -> None:
    systems = list(runs)
    head = f"{'query':>5} " + " ".join(f"{s + ' s':>10}" for s in systems) + f" {'a/b':>7} {'a/c':>7} {'a/d':>7}  check"
    print()
    b = "Spark JDBC" + (" (the faster of jdbc and jdbc-join per query)" if "jdbc-join" in runs else "")
    print(f"TPC-H SF {args.sf:g}, best of {args.repeats}; a = spark-htap replica, b = {b}, c = static Parquet,"
          " d = DuckDB over the Parquet copy")
    print(head)
    print("-" * len(head))
    for rec in per_query:
        cells = []
        for s in systems:
            best = rec[s]["best_s"]
            cells.append(f"{best:>10.2f}" if best is not None else f"{'FAILED':>10}")
        ab = _fmt(rec.get("ratio_htap_jdbc"))
        ac = _fmt(rec.get("ratio_htap_parquet"))
        ad = _fmt(rec.get("ratio_htap_duckdb"))
        problems = [f"{s}: {c}" for s, c in rec["check"].items() if c not in ("equal", "reference")]
        print(f"{'Q' + str(rec['query']):>5} " + " ".join(cells)
              + f" {ab:>7} {ac:>7} {ad:>7}  "
              + ("; ".join(problems) if problems else "ok"))
    print("-" * len(head))
    for pair, label in (("htap/jdbc", "a/b"), ("htap/parquet", "a/c"), ("htap/duckdb", "a/d")):
        g = geo[pair]
        if g["geomean"] is not None:
            speed = f"{1 / g['geomean']:.2f}x faster" if g["geomean"] < 1 else f"{g['geomean']:.2f}x slower"
            print(f"geometric mean {label} = {g['geomean']:.3f} over {len(g['queries'])} queries (spark-htap {speed})")
    load = sum(r.mean_loadavg for r in runs.values()) / len(runs)
    print(f"mean 1-minute load average during the runs: {load:.1f} on {os.cpu_count()} CPUs")
    print("Postgres server CPU seconds during each system's queries: "
          + ", ".join(f"{s} {run.pg_cpu_s:.1f} s (of {run.wall_s:.0f} s)"
                     for s, run in runs.items()))
    for rec in per_query:
        for s in systems:
            if rec[s]["error"]:
                print(f"  Q{rec['query']} failed on {s}: {rec[s]['error']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.command = "python -m bench.tpch " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    log(f"TPC-H SF {args.sf:g}: queries {','.join(map(str, args.queries))}; systems {','.join(args.systems)}; "
        f"best of {args.repeats}")
    if args.private_postgres:
        from htap import localpg

        args.dsn = localpg.start(args.work / "pg", PRIVATE_PG_PORT)
        log(f"Postgres: private cluster {args.work / 'pg'} at {args.dsn}")
    try:
        return run(args, started)
    finally:
        if args.private_postgres:
            from htap import localpg

            localpg.stop(args.work / "pg")


def run(args: argparse.Namespace, started: float) -> int:
    postmaster = postmaster_pid(args.dsn)
    marker = data.load_postgres(args.dsn, args.sf, force=args.reload)
    counts = data.row_counts(args.dsn)
    bounds = data.key_bounds(args.dsn)
    parquet_files = data.export_parquet(args.dsn, marker, args.work / "parquet" / f"sf{args.sf:g}") \
        if "parquet" in args.systems or "duckdb" in args.systems else {}
    jdbc = JdbcSettings.from_dsn(args.dsn, args.jdbc_partitions, args.jdbc_fetch_size, args.jdbc_join_pushdown)
    replica = Replica(args.work / "htap", args.dsn)
    spark = None
    runs: dict[str, SystemRun] = {}
    try:
        if "htap" in args.systems:
            replica.start(args.copy_timeout)
        log(f"Spark: starting one session ({args.master}) with the catalog shim and the PostgreSQL JDBC driver")
        spark, spark_conf = spark_session(replica.config, jdbc, args.driver_memory, args.shuffle_partitions,
                                          need_jdbc=any(s in args.systems for s in JDBC_SYSTEMS),
                                          master=args.master, extra=dict(c.split("=", 1) for c in args.conf))
        subtree = "false" if args.no_subtree_pushdown else "true"  # on for the bench: its data is never updated
        spark.conf.set("spark.htap.wholeQueryPushdown", subtree)
        spark_conf = {**spark_conf, "spark.htap.wholeQueryPushdown": subtree}
        if parquet_files and "parquet" in args.systems:
            register_parquet(spark, parquet_files)
        duck = duckdb_connection(parquet_files, os.cpu_count()) if "duckdb" in args.systems else None
        refs = {s: table_refs(s, bounds, jdbc) for s in args.systems}
        for s in args.systems:
            log(f"[{s}] {LABEL[s]}, e.g. {refs[s]['lineitem']}")
        log(f"running {len(args.queries)} queries, best of {args.repeats}, each on {', '.join(args.systems)} in turn")
        # The replica with Spark's join pushdown on (joins run inside its scans); JDBC as asked.
        join_pushdown = {"htap": True, "jdbc": args.jdbc_join_pushdown, "jdbc-join": True, "parquet": False}
        runs = run_queries(spark, refs, args.queries, args.repeats, args.sf, args.timeout, postmaster,
                           join_pushdown=join_pushdown, duck=duck)
        htap_tables = htap_table_states(spark) if "htap" in args.systems else None
    finally:
        if spark is not None:
            spark.stop()
        replica.stop(drop_slot=True)

    per_query, geo = summarize(args, runs)
    result = {
        "benchmark": "tpch",
        "sf": args.sf,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "total_s": round(time.time() - started, 1),
        "command": args.command,
        "note": args.note,
        "repeats": args.repeats,
        "machine": machine_info(args.dsn),
        "data": {"marker": marker, "rows": counts},
        "postgres": {"dsn": args.dsn, "private_cluster": args.private_postgres, "postmaster_pid": postmaster,
                     "cpu_counted": "utime+stime+cutime+cstime of the postmaster and its children, from /proc"},
        "replica_initial_copy_s": None if replica.copy_s is None else round(replica.copy_s, 1),
        "htap_tables_after_run": htap_tables,
        "spark_master": args.master,
        "spark_conf": {k: v for k, v in spark_conf.items() if "password" not in k},
        "systems": {
            s: {
                "label": LABEL[s],
                "table_reference_lineitem": table_refs(s, bounds, jdbc)["lineitem"],
                "postgres_cpu_s": None if postmaster is None else round(run.pg_cpu_s, 2),
                "wall_s": round(run.wall_s, 1),
                "mean_loadavg_1min": round(run.mean_loadavg, 2),
                "table_rows_seen": run.table_rows,
            }
            for s, run in runs.items()
        },
        "geomean_ratios": geo,
        "queries": per_query,
        "query_text": {q: query_text(q, {t: t for t in data.TABLE_NAMES}, args.sf) for q in args.queries},
    }
    print_table(args, runs, per_query, geo)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    log(f"wrote {args.out}")
    failed = any(c.startswith("MISMATCH") for rec in per_query for c in rec["check"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
