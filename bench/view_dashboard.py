"""Derived views through Spark (issue 31): dashboard queries over TPC-H's lineitem answered from
a view's states (ViewRewrite) vs the same queries over the table's replica (the rule off) vs
Spark's JDBC catalog on the same Postgres; ratios from runs interleaved in one Spark session,
answers checked equal across the three.

  python -m bench.view_dashboard [--sf 1] [--private-postgres] [--repeats 3]
                                 [--out bench/results/views-spark-sf1.json]

Views, created with `htap views create` once the replica's copy is done and built by the service:
  by_flags: Q1's groups and filter — SELECT l_returnflag, l_linestatus, sums, averages and
            count(*) FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY ...
  by_day:   SELECT l_shipdate, l_shipmode, count(*), sum(l_quantity), sum(l_extendedprice)
            FROM lineitem GROUP BY l_shipdate, l_shipmode (about 17,500 groups at any SF)
Queries read them at the same or a coarser grouping, with filters on group columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench import data
from bench.compare import compare
from bench.data import log
from bench.runners import HTAP_CATALOG, JdbcSettings, Replica, run_one, spark_session, table_refs
from bench.tpch import BENCH_DIR, DEFAULT_DSN, PRIVATE_PG_PORT, machine_info

VIEWS = {
    "by_flags": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_price,"
                " avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc,"
                " count(*) AS count_order FROM tpch.lineitem WHERE l_shipdate <= DATE '1998-09-02'"
                " GROUP BY l_returnflag, l_linestatus",
    "by_day": "SELECT l_shipdate, l_shipmode, count(*) AS n, sum(l_quantity) AS qty, sum(l_extendedprice) AS price"
              " FROM tpch.lineitem GROUP BY l_shipdate, l_shipmode",
}
QUERIES = {  # over {t}: the lineitem reference of each system
    "q1-like": "SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice), avg(l_quantity),"
               " avg(l_extendedprice), avg(l_discount), count(*) FROM {t} WHERE l_shipdate <= DATE '1998-09-02'"
               " GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    "mode-1995": "SELECT l_shipmode, count(*), sum(l_extendedprice) FROM {t}"
                 " WHERE l_shipdate BETWEEN DATE '1995-01-01' AND DATE '1995-12-31' GROUP BY l_shipmode ORDER BY 1",
    "by-year": "SELECT year(l_shipdate) AS y, count(*), sum(l_quantity), sum(l_extendedprice) FROM {t}"
               " GROUP BY year(l_shipdate) ORDER BY y",
    "one-day": "SELECT l_shipmode, sum(l_quantity) FROM {t} WHERE l_shipdate = DATE '1996-03-13'"
               " GROUP BY l_shipmode ORDER BY 1",
}
SYSTEMS = ("view", "replica", "jdbc")
LABEL = {"view": "spark-htap, answered from the view (spark.htap.viewRewrite=true)",
         "replica": "spark-htap, the table's replica (spark.htap.viewRewrite=false)",
         "jdbc": "Spark JDBC catalog on the same Postgres"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.view_dashboard", description=__doc__.splitlines()[0])
    p.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1: lineitem has 6M rows)")
    p.add_argument("--repeats", type=int, default=3, help="runs per query and system, the best counts (default 3)")
    p.add_argument("--dsn", default=os.environ.get("HTAP_BENCH_DSN", DEFAULT_DSN), help="libpq DSN of the Postgres")
    p.add_argument("--private-postgres", action="store_true", help=f"a private Postgres under <work>/pg (port {PRIVATE_PG_PORT})")
    p.add_argument("--jdbc-partitions", type=int, default=4, help="JDBC numPartitions for lineitem (default 4)")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--work", type=Path, default=BENCH_DIR / ".work")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--note", default="")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    args.out = args.out or BENCH_DIR / "results" / f"views-spark-sf{args.sf:g}.json"
    return args


def wait_views(replica: Replica, timeout_s: float = 3600) -> float:
    """Seconds until the service has built every view (its first checkpoint after `views create`)."""
    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    started = time.monotonic()
    cfg = load_config(replica.config)
    while True:
        with MetadataStore(cfg.metadata) as store:
            views = store.list_views()
        if views and all(v.table.readable for v in views):
            return time.monotonic() - started
        failed = [f"{v.name}: {v.table.error}" for v in views if v.table.error]
        if failed or time.monotonic() - started > timeout_s:
            raise RuntimeError(f"views not built: {failed or 'timeout'}\n{replica.log_tail()}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.view_dashboard " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    if args.private_postgres:
        from htap import localpg

        args.dsn = localpg.start(args.work / "pg", PRIVATE_PG_PORT)
    replica = Replica(args.work / "htap-views", args.dsn, tables=("lineitem",))
    spark = None
    try:
        marker = data.load_postgres(args.dsn, args.sf)
        machine = machine_info(args.dsn)
        replica.start(3600)
        for name, sql in VIEWS.items():
            replica.htap("views", "create", name, "--sql", sql)
        built_s = wait_views(replica)
        log(f"views built {built_s:.1f} s after `htap views create`")
        bounds = data.key_bounds(args.dsn)
        jdbc = JdbcSettings.from_dsn(args.dsn, args.jdbc_partitions, 10000, False)
        spark, _ = spark_session(replica.config, jdbc, args.driver_memory, 4, need_jdbc=True, master=args.master)
        refs = {"view": table_refs("htap", bounds, jdbc)["lineitem"], "replica": table_refs("htap", bounds, jdbc)["lineitem"],
                "jdbc": table_refs("jdbc", bounds, jdbc)["lineitem"]}
        results = {}
        for q, text in QUERIES.items():
            best: dict[str, float] = {}
            answers: dict[str, list] = {}
            plans: dict[str, bool] = {}
            for r in range(args.repeats):
                for system in SYSTEMS:  # interleaved: the same load on each
                    spark.conf.set("spark.htap.viewRewrite", str(system == "view").lower())
                    sql = text.format(t=refs[system])
                    seconds, rows, _schema = run_one(spark, sql, args.timeout)
                    best[system] = min(best.get(system, seconds), seconds)
                    answers[system] = rows
                    if r == 0:
                        plan = spark.sql(sql)._jdf.queryExecution().executedPlan().toString()
                        plans[system] = f"{HTAP_CATALOG}.views." in plan
            checks = {s: compare(answers["jdbc"], answers[s], ordered=True) or "OK" for s in ("view", "replica")}
            results[q] = {"best_s": {s: round(v, 4) for s, v in best.items()}, "read_view": plans, "check": checks,
                          "view_vs_replica": round(best["view"] / best["replica"], 4),
                          "view_vs_jdbc": round(best["view"] / best["jdbc"], 4),
                          "replica_vs_jdbc": round(best["replica"] / best["jdbc"], 4)}
            log(f"{q}: view {best['view']:.3f} s, replica {best['replica']:.3f} s, jdbc {best['jdbc']:.3f} s;"
                f" view/replica {results[q]['view_vs_replica']:.3f}, view/jdbc {results[q]['view_vs_jdbc']:.3f};"
                f" checks {checks}; read the view: {plans}")
    finally:
        if spark is not None:
            spark.stop()
        replica.stop(drop_slot=True)
        if args.private_postgres:
            from htap import localpg

            localpg.stop(args.work / "pg")
    out = {"benchmark": "views-spark", "sf": args.sf, "command": command, "note": args.note,
           "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
           "total_s": round(time.time() - started, 1), "repeats": args.repeats, "machine": machine,
           "data": {"marker": marker}, "replica_initial_copy_s": replica.copy_s, "views_built_s": round(built_s, 1),
           "systems": LABEL, "views": VIEWS, "queries": {q: {"sql": QUERIES[q], **r} for q, r in results.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    log(f"wrote {args.out}")
    return 1 if any(c != "OK" for r in results.values() for c in r["check"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
