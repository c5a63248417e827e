"""Derived views through Spark (issue 31): dashboard queries over TPC-H's lineitem answered from
a view's states (ViewRewrite) vs the same queries over the table's replica (the rule off) vs
Spark's JDBC catalog on the same Postgres; ratios from runs interleaved in one Spark session,
answers checked equal across the three.

  python -m bench.view_dashboard [--sf 1] [--private-postgres] [--repeats 3]
                                 [--out bench/results/views-spark-sf1.json]

Views, created with `htap views create` once the replica's copy is done and built by the service:
  by_flags:  Q1's groups and filter — SELECT l_returnflag, l_linestatus, sums, averages and
             count(*) FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY ...
  by_day:    SELECT l_shipdate, l_shipmode, count(*), sum(l_quantity), sum(l_extendedprice)
             FROM lineitem GROUP BY l_shipdate, l_shipmode (about 17,500 groups at any SF)
  by_nation: lineitem joined with supplier by its key, by the supplier's nation and the line's
             return flag (a join view: 75 groups)
Queries read them at the same or a coarser grouping, with filters on group columns.

Then the views' maintenance cost per checkpoint, from the service's own checkpoint timing (its
`views` phase beside the whole checkpoint): updates of lineitem rows (every view's groups move),
and updates of supplier rows (the join view re-groups every line of those suppliers: a read of
lineitem's join columns at the previous checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import psycopg2

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
    "by_nation": "SELECT s.s_nationkey, l.l_returnflag, count(*) AS n, sum(l.l_extendedprice) AS price,"
                 " sum(l.l_quantity) AS qty FROM tpch.lineitem l JOIN tpch.supplier s ON l.l_suppkey = s.s_suppkey"
                 " GROUP BY s.s_nationkey, l.l_returnflag",
}
TABLES = ("lineitem", "supplier")
QUERIES = {  # over {lineitem} and {supplier}: the table references of each system
    "q1-like": "SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice), avg(l_quantity),"
               " avg(l_extendedprice), avg(l_discount), count(*) FROM {lineitem} WHERE l_shipdate <= DATE '1998-09-02'"
               " GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    "mode-1995": "SELECT l_shipmode, count(*), sum(l_extendedprice) FROM {lineitem}"
                 " WHERE l_shipdate BETWEEN DATE '1995-01-01' AND DATE '1995-12-31' GROUP BY l_shipmode ORDER BY 1",
    "by-year": "SELECT year(l_shipdate) AS y, count(*), sum(l_quantity), sum(l_extendedprice) FROM {lineitem}"
               " GROUP BY year(l_shipdate) ORDER BY y",
    "one-day": "SELECT l_shipmode, sum(l_quantity) FROM {lineitem} WHERE l_shipdate = DATE '1996-03-13'"
               " GROUP BY l_shipmode ORDER BY 1",
    "nation-revenue": "SELECT s.s_nationkey, sum(l.l_extendedprice), count(*) FROM {lineitem} l JOIN {supplier} s"
                      " ON l.l_suppkey = s.s_suppkey GROUP BY s.s_nationkey ORDER BY 1",
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


CHANGES = {  # the source's changes whose checkpoints are timed, each run `MAINTENANCE_ROUNDS` times
    "lineitem rows": "UPDATE tpch.lineitem SET l_quantity = l_quantity + 1 WHERE l_orderkey % 20000 = {r}",
    "supplier rows": "UPDATE tpch.supplier SET s_nationkey = (s_nationkey + 1) % 25 WHERE s_suppkey % 2000 = {r}",
}
MAINTENANCE_ROUNDS = 3


def maintenance_cost(replica: Replica, dsn: str) -> dict:
    """Per kind of change: the rows it changed, and the checkpoints that stored it — their time
    in all, in the `views` phase (keeping the three views) and in `before_images` (reading the
    changed keys' previous rows, which only views need), from the service's log."""
    from bench.freshness import checkpoint_profile
    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    cfg = load_config(replica.config)
    out = {}
    for kind, sql in CHANGES.items():
        since, changed = time.time(), 0
        for r in range(1, MAINTENANCE_ROUNDS + 1):
            conn = psycopg2.connect(dsn)
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute(sql.format(r=r))
                    changed += cur.rowcount
                    cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
                    seq = int(cur.fetchone()[0]) - 1  # everything committed so far (tests' source_seq)
            finally:
                conn.close()
            while True:  # every view has reached the change (its checkpoint is the tables')
                with MetadataStore(cfg.metadata) as store:
                    if all((v.table.max_safe_seq or 0) >= seq for v in store.list_views()):
                        break
                time.sleep(0.2)
        time.sleep(1.1)  # the log line of the last checkpoint is written after its commit
        profile = checkpoint_profile(replica.log_path, since, time.time())
        out[kind] = {"sql": sql, "rounds": MAINTENANCE_ROUNDS, "rows_changed": changed,
                     "checkpoints": profile["checkpoints"], "views_s": profile["phases"].get("views"),
                     "before_images_s": profile["phases"].get("before_images")}
        log(f"maintenance, {kind}: {changed} rows changed; checkpoints {profile['checkpoints']};"
            f" their views phase {profile['phases'].get('views')}; before-images {profile['phases'].get('before_images')}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.view_dashboard " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    if args.private_postgres:
        from htap import localpg

        args.dsn = localpg.start(args.work / "pg", PRIVATE_PG_PORT)
    replica = Replica(args.work / "htap-views", args.dsn, tables=TABLES)
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
        htap, spark_jdbc = table_refs("htap", bounds, jdbc), table_refs("jdbc", bounds, jdbc)
        refs = {"view": htap, "replica": htap, "jdbc": spark_jdbc}
        results = {}
        for q, text in QUERIES.items():
            best: dict[str, float] = {}
            answers: dict[str, list] = {}
            plans: dict[str, bool] = {}
            for r in range(args.repeats):
                for system in SYSTEMS:  # interleaved: the same load on each
                    spark.conf.set("spark.htap.viewRewrite", str(system == "view").lower())
                    sql = text.format(**{t: refs[system][t] for t in TABLES})
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
        spark.stop()
        spark = None
        maintenance = maintenance_cost(replica, args.dsn)
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
           "systems": LABEL, "views": VIEWS, "queries": {q: {"sql": QUERIES[q], **r} for q, r in results.items()},
           "maintenance": maintenance}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    log(f"wrote {args.out}")
    return 1 if any(c != "OK" for r in results.values() for c in r["check"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
