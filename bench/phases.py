"""Where a TPC-H query's time goes through the replica, phase by phase (issue 12, fixed cost).

    python -m bench.phases --work bench/.work/tpch [--sf 1] [--queries count,lookup,3,6,14,22] [--rounds 5]

Reuses what `python -m bench.tpch --work W` left behind: the replica (W/htap/htap.toml; no
`htap serve` needed, the data is static) and the Parquet copy (W/parquet/sf<SF>). One local
Spark session runs each query through the HTAP catalog split into Spark's phases (analysis:
loadTable per table; optimizer: the pushdown rules, ours included; physical planning: the
strategies, the snapshot token; execution: the scans' Python planning and the tasks), next to
DuckDB directly over the Parquet copy and one bare Spark Python task, interleaved per round.
Figures are medians; state the machine's load (printed) when you quote them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True, help="the work dir of a previous bench.tpch run")
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--queries", default="3,6,14,22")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, help="write the figures as JSON here too")
    p.add_argument("--ab", default="", help="a Spark conf key=value to A/B against its default, interleaved per query"
                   " (e.g. spark.htap.bridgePlanning=false)")
    args = p.parse_args()

    from bench import data
    from bench.queries import query_text as tpch_query
    from bench.runners import HTAP_CATALOG, JdbcSettings, duckdb_connection, spark_session, tree_cpu_seconds

    config = args.work / "htap" / "htap.toml"
    parquet = args.work / "parquet" / f"sf{args.sf:g}"
    if not config.is_file() or not parquet.is_dir():
        raise SystemExit(f"no replica or Parquet copy under {args.work}: run bench.tpch --work {args.work} first")
    files = {t: parquet / f"{t}.parquet" for t in data.TABLE_NAMES}
    jdbc = JdbcSettings.from_dsn("host=127.0.0.1 dbname=none", 1, 1000, False)
    spark, _conf = spark_session(config, jdbc, "2g", 4, need_jdbc=False)
    spark.conf.set("spark.sql.optimizer.datasourceV2JoinPushdown", "true")  # as bench.tpch runs the replica
    duck = duckdb_connection(files, os.cpu_count())
    htap_refs = {t: f"{HTAP_CATALOG}.{data.SCHEMA}.{t}" for t in data.TABLE_NAMES}
    duck_refs = {t: f"duckdb_{t}" for t in data.TABLE_NAMES}

    def phases(sql: str) -> dict[str, float]:
        c0 = cpu_s()
        t0 = time.perf_counter()
        df = spark.sql(sql)
        t1 = time.perf_counter()
        qe = df._jdf.queryExecution()
        qe.optimizedPlan()
        t2 = time.perf_counter()
        qe.executedPlan()
        t3 = time.perf_counter()
        df.collect()
        t4 = time.perf_counter()
        return {"analysis": t1 - t0, "optimizer": t2 - t1, "physical": t3 - t2, "execution": t4 - t3, "total": t4 - t0,
                "cpu": cpu_s() - c0}

    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    def cpu_s() -> float:
        """CPU seconds of the driver JVM and every process under it (Python workers, the bridge)."""
        return tree_cpu_seconds(jvm)

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def bare_task() -> None:
        spark.sparkContext.parallelize([1], 1).map(lambda x: x).collect()

    trivial = {"count": "SELECT count(*) FROM {nation}", "lookup": "SELECT * FROM {orders} WHERE o_orderkey = 7"}

    def query_text(q, refs: dict[str, str], sf: float) -> str:
        return trivial[q].format(**refs) if q in trivial else tpch_query(int(q), refs, sf)

    queries = args.queries.split(",")
    for q in queries:  # warm: workers, classes, DuckDB's file cache
        phases(query_text(q, htap_refs, args.sf))
        duck.execute(query_text(q, duck_refs, args.sf)).fetchall()
    bare_task()
    bare: list[float] = []
    loads: list[float] = []
    ab_key, _, ab_value = args.ab.partition("=")
    variants = {"": None, f" [{args.ab}]": ab_value} if args.ab else {"": None}
    runs = {(q, v): [] for q in queries for v in variants}
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for q in queries:
            for v, value in variants.items():
                if ab_key:
                    spark.conf.set(ab_key, value) if value is not None else spark.conf.unset(ab_key)
                r = phases(query_text(q, htap_refs, args.sf))
                r["duckdb"] = timed(lambda: duck.execute(query_text(q, duck_refs, args.sf)).fetchall())
                runs[(q, v)].append(r)
        bare.append(timed(bare_task))
    spark.stop()
    result = {
        "load_average_1min": round(statistics.mean(loads), 2), "cpus": os.cpu_count(), "rounds": args.rounds,
        "bare python task s": round(statistics.median(bare), 4),
        "queries": {f"{q if q in trivial else 'Q' + q}{v}": {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
                    for (q, v), rs in runs.items()},
    }
    for name, r in result["queries"].items():
        r["htap / duckdb"] = round(r["total"] / r["duckdb"], 2)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load {result['load_average_1min']}; " + "; ".join(
        f"{n} {r['total']:.3f}s (a {r['analysis']:.3f} o {r['optimizer']:.3f} p {r['physical']:.3f} "
        f"x {r['execution']:.3f}; cpu {r['cpu']:.2f}) duck {r['duckdb']:.3f}" for n, r in result["queries"].items()), file=sys.stderr)


if __name__ == "__main__":
    main()
