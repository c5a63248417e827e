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
    from fuzz.grammar import Query
    from fuzz.run import SPARK_SETTINGS, Targets, describe, evaluate, run
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
            oracle_reordered=copy.reordered_refs,
        )
        for key, value in SPARK_SETTINGS.items():
            spark.conf.set(key, value)
        report = run(spark, schema, targets, seed, CI_SEEDS[seed], shrink_budget_s=60, shrink_total_s=SHRINK_TOTAL_S,
                     progress_every=0)
    finally:
        for key in SPARK_SETTINGS:
            spark.conf.unset(key)
        copy.drop(spark)
    print(report.details())
    print(report.summary())
    assert report.queries == CI_SEEDS[seed]
    failures = len(report.failures)
    assert failures == 0, f"{report.summary().splitlines()[-1]}\n\n" + "\n\n".join(describe(f) for f in report.failures)


# Spark 4.3 answers this shape nondeterministically: PushProjectionThroughLimitAndOffset lifts the
# projection holding the correlated scalar subquery above the derived table's LIMIT, the subquery
# becomes a LEFT OUTER JOIN under that LIMIT, EliminateSorts drops the ORDER BY below the join, and
# the LIMIT keeps whichever 3 rows come first (found by fuzz seed 11, query 93; plain Spark and both
# routes disagreed with one another).
ORDER_DEPENDENT = ("SELECT d.v, (SELECT COUNT(*) FROM zz_u_zz AS u WHERE u.k = d.k) AS n "
                   "FROM (SELECT k, v FROM zz_t_zz ORDER BY v DESC LIMIT 3) AS d")


def test_an_answer_plain_spark_gives_only_for_one_row_order_is_not_a_failure(spark, tmp_path):
    """The fuzzer's check of the oracle against itself: the same rows in two physical orders. Over
    Spark alone (the 'replica' and 'source' sides read the rows in one order, the oracle in the
    other), a query Spark answers by row order is set apart, a deterministic one compares equal,
    and a real difference of rows stays a mismatch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(name: str, columns: dict[str, list]) -> str:
        folder = tmp_path / name
        folder.mkdir()
        pq.write_table(pa.table(columns), folder / "part-0.parquet")
        spark.read.parquet(str(folder)).createOrReplaceTempView(name)
        return name

    keys = list(range(1, 21))
    forward = {"t": table("t_fwd", {"k": keys, "v": keys}), "u": table("u_fwd", {"k": [18, 19, 19, 20]})}
    backward = {"t": table("t_bwd", {"k": keys[::-1], "v": keys[::-1]}), "u": table("u_bwd", {"k": [20, 19, 19, 18]})}
    other = {"t": table("t_other", {"k": keys, "v": [x * 10 for x in keys]}), "u": forward["u"]}

    def outcome(sql: str, replica: dict[str, str]):
        targets = Targets(replica=replica, source=forward, oracle=backward, oracle_reordered=(forward,))
        return evaluate(spark, Query(0, 0, sql, False, "given"), targets, timeout_s=120)

    nondeterministic = outcome(ORDER_DEPENDENT, forward)
    assert nondeterministic.kind == "spark-nondeterministic", nondeterministic.diffs
    assert "rows" in nondeterministic.spark_nondeterministic.what

    top = "SELECT k, v FROM zz_t_zz ORDER BY v DESC LIMIT 3"
    assert outcome(top, forward).kind == "ok"
    wrong = outcome(top, other)
    assert wrong.kind == "mismatch" and set(wrong.diffs) == {"replica"}
