"""python -m fuzz --queries N --seed S [--keep] [--no-char]

Starts a private Postgres, creates the seed's random tables and rows there, replicates them
(`htap init`, `tables add`, `htap serve`), applies random batches of changes and waits until the
replica has them, copies the same rows to Parquet for the oracle, then runs N random queries
three ways (replica route, source route, plain Spark over Parquet) and reports every difference,
shrunk. Progress goes to stderr; the report to stdout, its last line

    fuzz: N queries, M mismatches, E one-sided errors, K nondeterministic in plain Spark (not compared),
          P% fully pushed

(K: queries whose plain-Spark answer changes when Spark reads the same rows in another order.)

The exit code is 1 when there was any mismatch or one-sided error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=200, help="queries to run (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the schema, the data and the queries (default 0)")
    p.add_argument("--start", type=int, default=0, help="index of the first query (default 0; with --queries 1, "
                   "reruns one query of a report)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (Postgres, workspace, Parquet copy)")
    p.add_argument("--no-char", action="store_true",
                   help="declare the char(n) columns varchar(n) (the same rows and queries otherwise): the oracle "
                        "gives char(n) Spark's CHAR(n) semantics, which the catalog does not yet")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds per query run before it is cancelled (default 120)")
    p.add_argument("--shrink-budget", type=float, default=90,
                   help="seconds spent shrinking each failure (default 90; 0: report failures unshrunk); a one-sided "
                        "error like one shrunk before is not shrunk again")
    p.add_argument("--dir", help="folder to work in (default: a new temporary folder)")
    p.add_argument("--sql", action="append", default=[],
                   help="run this query (tables named as in the report: t0, t1, ...) three ways over the seed's tables "
                        "and print the results, instead of random queries (repeatable)")
    p.add_argument("--explain", action="store_true", help="with --sql: print the replica route's EXPLAIN too")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for every side (repeatable), e.g. spark.sql.adaptive.enabled=false")
    p.add_argument("--full-errors", action="store_true", help="with --sql: print each error's whole text (stacks)")
    p.add_argument("--partition-rows", type=int,
                   help="the replica's target rows per partition (e.g. 40: tables in several partitions, so that with"
                        " --conf spark.htap.splitSubtrees=true pushed work runs split by them)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["TZ"] = "UTC"  # as the tests: Spark hands TIMESTAMP values to Python as local times
    time.tzset()
    from htap.catalog.shim import spark_session

    from fuzz import oracle, source
    from fuzz.env import Environment, log
    from fuzz.run import SPARK_SETTINGS, Targets, describe, run, verify_copies
    from fuzz.schema import generate

    started = time.monotonic()
    schema = generate(args.seed, chars=not args.no_char)
    names = [t.name for t in schema.tables]
    log(f"fuzz: seed {args.seed}: tables " + "; ".join(
        f"{t.name}({', '.join(f'{c.name} {c.type.pg}' for c in t.columns)}) {len(t.rows)} rows" for t in schema.tables))
    env = Environment.start(args.dir, keep=args.keep)
    spark = None
    try:
        conn = source.connect(env.dsn)
        source.create(conn, "public", schema)
        env.replicate(names, partition_rows=args.partition_rows)
        changes = source.change(conn, "public", schema, wait=lambda: env.wait_caught_up(names))
        conn.close()
        log(f"fuzz: replica caught up after {changes} change statements in 3 batches "
            f"({time.monotonic() - started:.0f} s)")
        spark = spark_session("fz", env.config, **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("FATAL")  # failing queries are reported, not logged
        for key, value in SPARK_SETTINGS.items():
            spark.conf.set(key, value)
        for setting in args.conf:
            key, _, value = setting.partition("=")
            spark.conf.set(key.strip(), value.strip())
        for name, route in (("rep", "replica"), ("src", "source")):
            spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
            spark.conf.set(f"spark.sql.catalog.{name}.config", str(env.config))
            spark.conf.set(f"spark.sql.catalog.{name}.route", route)
        copy = oracle.build(spark, env.dsn, "public", schema, env.root / "oracle", "fz_oracle")
        targets = Targets(
            replica={t: f"rep.public.{t}" for t in names},
            source={t: f"src.public.{t}" for t in names},
            oracle=copy.refs,
            oracle_reordered=copy.reordered_refs,
        )
        for line in oracle.type_differences(spark, schema, targets.replica, copy):
            log(f"fuzz: type differs: {line}")
        for line in verify_copies(spark, schema, targets):
            log(f"fuzz: setup check failed: {line}")
        log(f"fuzz: oracle rows {copy.rows}; running {args.queries} queries")

        def on_failure(f):
            print(describe(f), flush=True)

        if args.sql:
            return run_given(spark, schema, targets, args)
        report = run(spark, schema, targets, args.seed, args.queries, start=args.start, timeout_s=args.timeout,
                     shrink_budget_s=args.shrink_budget, on_failure=on_failure)
    finally:
        if spark is not None:
            spark.stop()
        env.stop()
    print(report.details())
    print(f"wall time {time.monotonic() - started:.0f} s")
    print(report.summary(), flush=True)
    return 1 if report.mismatches or report.one_sided else 0


def run_given(spark, schema, targets, args: argparse.Namespace) -> int:
    """--sql: each query three ways, its outcome printed in full."""
    import re

    from fuzz.grammar import Query
    from fuzz.run import evaluate, outcome_text, quiet_query_errors
    from fuzz.shrink import parse, top_ordered

    names = "|".join(re.escape(t.name) for t in schema.tables)
    failed = 0
    with quiet_query_errors():
        for text in args.sql:
            template = re.sub(rf"\b({names})\b", r"zz_\1_zz", text)
            tree = parse(template)
            q = Query(args.seed, -1, template, tree is not None and top_ordered(tree), "given")
            out = evaluate(spark, q, targets, args.timeout)
            failed += out.kind in ("mismatch", "one-sided")
            print(f"=== {out.kind.upper()}: {text}\n  " + outcome_text(out).replace("\n", "\n  "))
            if out.kind == "ok" and out.results["replica"].table.rows:
                print("  rows (replica, first 5): " + "; ".join(map(repr, out.results["replica"].table.rows[:5])))
            if args.full_errors:
                for side, r in out.results.items():
                    if not r.ok:
                        print(f"  {side} error, in full:\n    " + (r.error_detail or "").replace("\n", "\n    "))
            if args.explain:
                plan = spark.sql("EXPLAIN " + q.text(targets.replica)).collect()[0][0]
                print("  replica plan:\n    " + plan.replace("\n", "\n    "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
