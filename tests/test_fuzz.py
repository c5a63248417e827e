"""The differential fuzzer (fuzz/, `python -m fuzz`) on fixed seeds: random tables with every
supported type and its traps (NULLs, -0.0, NaN, infinities, numeric at its precision limit,
case/accent/padding strings, year 1 and 9999 dates, char(n)), replicated, changed in three batches
(value and key updates, deletes, inserts, an unchanged TOASTed value), then random queries (joins
of every kind, EXISTS / IN / NOT IN subqueries under AND, OR and NOT, scalar subqueries, GROUP BY,
ROLLUP / CUBE / GROUPING SETS, HAVING, windows, set operations, CTEs, ORDER BY ... LIMIT OFFSET)
run on the replica route, the source route and plain Spark over a Parquet copy of the same rows.
Every answer must equal plain Spark's; an error on some of the three but not all is a failure.
Failures are shown shrunk (seed and query index reproduce them: `python -m fuzz --seed S --start I
--queries 1`).

Uses the suite's private Postgres (`workspace`) and the shared Spark session; the fuzzer's own
setup (fuzz/env.py) is for the CLI only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services import pg_dsn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # fuzz/ is the repo's, not an installed package (as bench/)
try:
    from fuzz import oracle, source
    from fuzz.run import Targets, describe, run
    from fuzz.schema import generate
finally:
    sys.path.remove(str(ROOT))

# seed -> queries. About 1.5 s per query (three runs) on 2 cores, plus ~15 s of setup per seed:
# under 4 minutes in all when nothing fails (failures add up to SHRINK_TOTAL_S per seed).
CI_SEEDS = {104: 40, 113: 40, 118: 40}  # each has char(n) columns; 2-4 tables
SHRINK_TOTAL_S = 90  # per seed: shrinking many failures would take long; the rest are shown as found


@pytest.mark.parametrize("seed", sorted(CI_SEEDS))
def test_fuzz_answers_equal_plain_spark(workspace, spark, tmp_path, seed):
    ws = workspace
    schema = generate(seed)
    names = [t.name for t in schema.tables]
    conn = source.connect(pg_dsn())
    try:
        source.create(conn, ws.schema, schema)
        for t in names:
            ws.htap("tables", "add", f"{ws.schema}.{t}")
        ws.start_service()
        for t in names:
            ws.wait_readable(t)

        def caught_up() -> None:
            for t in names:
                ws.wait_caught_up(t)

        source.change(conn, ws.schema, schema, wait=caught_up)
    finally:
        conn.close()

    replica, src = f"rep_{ws.source}", f"src_{ws.source}"
    for name, route in ((replica, "replica"), (src, "source")):
        spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{name}.config", str(ws.config))
        spark.conf.set(f"spark.sql.catalog.{name}.route", route)
    database = f"fz_{ws.source}"
    copy = oracle.build(spark, pg_dsn(), ws.schema, schema, tmp_path / "oracle", database)
    try:
        targets = Targets(
            replica={t: f"{replica}.{ws.schema}.{t}" for t in names},
            source={t: f"{src}.{ws.schema}.{t}" for t in names},
            oracle=copy.refs,
        )
        report = run(spark, schema, targets, seed, CI_SEEDS[seed], shrink_budget_s=60, shrink_total_s=SHRINK_TOTAL_S,
                     progress_every=0)
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    print(report.details())
    print(report.summary())
    assert report.queries == CI_SEEDS[seed]
    failures = len(report.failures)
    assert failures == 0, f"{report.summary().splitlines()[-1]}\n\n" + "\n\n".join(describe(f) for f in report.failures)
