"""Issue 31, views used by Spark: `<catalog>.views.<name>` reads as the view's own SQL (its
column names and types, AVG as Spark computes it), and an aggregate over a table that one of
its views answers (the same or a coarser grouping, the view's filter plus conjuncts over group
columns, aggregates its states derive) reads the view's states instead of the table
(ViewRewrite). Every query is run with the rewrite on and off: the answers must be the same,
whatever the rule decided, and EXPLAIN says which ran."""

from __future__ import annotations

import json
import random
from collections import Counter
from decimal import Decimal

import pytest

from account_writers import account_writers
from workspace import wait_until

VIEW_ALL = ("SELECT region, branch, count(*) AS cnt, sum(balance) AS total, avg(balance) AS mean, min(n) AS low,"
            " max(n) AS high, sum(n) AS n_total FROM {s}.acc GROUP BY region, branch")
VIEW_BIG = "SELECT region, count(*) AS cnt, sum(balance) AS total FROM {s}.acc WHERE balance >= 50 GROUP BY region"


@pytest.fixture
def views(workspace, spark, catalog):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.acc (id int PRIMARY KEY, branch int, region text, balance numeric(12,2), n int)")
    ws.sql(f"INSERT INTO {s}.acc SELECT g, g % 7, CASE WHEN g % 9 = 0 THEN NULL ELSE 'r' || (g % 3) END,"
           f" (g * 37 % 1000) / 4.0, CASE WHEN g % 5 = 0 THEN NULL ELSE g % 13 END FROM generate_series(1, 400) g")
    ws.htap("tables", "add", f"{s}.acc")
    ws.start_service()
    ws.wait_readable("acc")
    ws.htap("views", "create", "v_all", "--sql", VIEW_ALL.format(s=s))
    ws.htap("views", "create", "v_big", "--sql", VIEW_BIG.format(s=s))
    # The views built, and the table as it was then: what time travel to that seq answers.
    first = ws.table("acc").max_safe_seq
    for name in ("v_all", "v_big"):
        wait_until(lambda: (_view_seq(ws, name) or -1) >= first, None, f"view {name} to be built")
    ws.first = (first, Counter(tuple(_plain(v) for v in r) for r in ws.sql(
        f"SELECT region, count(*), sum(balance) FROM {s}.acc GROUP BY region")))
    ws.sql(f"UPDATE {s}.acc SET region = 'r7', balance = balance * 3 WHERE id % 6 = 0")
    ws.sql(f"DELETE FROM {s}.acc WHERE id % 11 = 0")
    ws.wait_caught_up("acc")
    seq = ws.table("acc").max_safe_seq
    for name in ("v_all", "v_big"):
        wait_until(lambda: (_view_seq(ws, name) or -1) >= seq, None, f"view {name} to reach the table")
    spark.conf.set("spark.htap.viewRewrite", "true")
    yield s
    spark.conf.unset("spark.htap.viewRewrite")


def _view_seq(ws, name: str):
    with ws.store() as store:
        return store.get_view(ws.source, name).table.max_safe_seq


def _run(spark, sql: str, rewrite: bool) -> tuple[Counter, str]:
    spark.conf.set("spark.htap.viewRewrite", str(rewrite).lower())
    df = spark.sql(sql)
    plan = df._jdf.queryExecution().executedPlan().toString()
    return Counter(tuple(_plain(v) for v in r) for r in df.collect()), plan


def _plain(v):
    return v.normalize() if isinstance(v, Decimal) else v


def _read_view(catalog: str, plan: str) -> bool:
    return f"{catalog}.views." in plan


def test_views_read_as_their_sql_and_answer_the_aggregates_they_hold(workspace, spark, catalog, views):
    """One workspace for three checks (each builds on the same views): reading a view, which
    aggregates a view answers, and a failed-over table."""
    _reads_as_its_own_sql(workspace, spark, catalog, views)
    _which_aggregates_a_view_answers(workspace, spark, catalog, views)
    _time_travel_reads_the_view_at_that_seq(workspace, spark, catalog, views)
    _failed_over_table_answers_its_views_from_the_source(workspace, spark, catalog, views)


def _reads_as_its_own_sql(workspace, spark, catalog, views):
    s = views
    df = spark.sql(f"SELECT * FROM {catalog}.views.v_all")
    assert df.columns == ["region", "branch", "cnt", "total", "mean", "low", "high", "n_total"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "string", "int", "bigint", "decimal(22,2)", "decimal(16,6)", "int", "int", "bigint"]
    got, plan = _run(spark, f"SELECT * FROM {catalog}.views.v_all", True)
    assert _read_view(catalog, plan), plan
    with workspace.pg.cursor() as cur:
        cur.execute(f"SELECT region, branch, count(*), sum(balance), round(avg(balance), 6), min(n), max(n), sum(n)"
                    f" FROM {s}.acc GROUP BY region, branch")
        assert got == Counter(tuple(_plain(v) for v in r) for r in cur.fetchall())
    plain, plan = _run(spark, f"SELECT * FROM {catalog}.views.v_all", False)
    assert not _read_view(catalog, plan), plan
    assert plain == got
    shown = {r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.views").collect()}
    assert shown >= {"v_all", "v_big"}
    # The system table lists views beside tables, with their state and seq.
    listed = {r.table_name: r for r in spark.sql(f"SELECT * FROM {catalog}.htap.tables WHERE schema_name = 'views'")
              .collect()}
    assert set(listed) == {"v_all", "v_big"} and all(r.state == "streaming" for r in listed.values())


AGGREGATES = ["count(*)", "count(balance)", "sum(balance)", "avg(balance)", "min(n)", "max(n)", "sum(n)", "avg(n)",
              "count(n)", "min(balance)", "count(DISTINCT n)", "max(id)", "count(DISTINCT branch)", "min(region)",
              "max(branch)", "sum(DISTINCT branch)"]
FILTERS = [None, "region = 'r1'", "branch IN (1, 2, 3)", "branch > 4 AND region IS NOT NULL", "n > 3",
           "balance >= 50", "balance >= 50 AND region <> 'r0'", "region LIKE 'r%'", "balance >= 60",
           "branch BETWEEN 2 AND 5", "coalesce(region, 'none') = 'none'"]


def test_aggregates_a_view_answers_read_it_and_agree_with_the_table(spark, catalog, views):
    """Random aggregates over the table: each answer equals the one computed from the table, and
    the ones a view can answer are answered from a view."""
    s = views
    rng = random.Random(31)
    rewritten = 0
    for _ in range(24):
        groups = rng.sample(["region", "branch"], rng.randint(0, 2))
        picks = rng.sample(AGGREGATES, rng.randint(1, 3))
        where = rng.choice(FILTERS)
        sql = (f"SELECT {', '.join([*groups, *picks])} FROM {catalog}.{s}.acc"
               + (f" WHERE {where}" if where else "") + (f" GROUP BY {', '.join(groups)}" if groups else ""))
        on, plan_on = _run(spark, sql, True)
        off, plan_off = _run(spark, sql, False)
        assert on == off, sql
        assert not _read_view(catalog, plan_off), plan_off
        rewritten += _read_view(catalog, plan_on)
    assert rewritten >= 5


CASES = [  # (query, the view that answers it, or None: the table)
    ("SELECT region, sum(balance), avg(balance), count(*) FROM {c}.{s}.acc GROUP BY region", "v_all"),
    ("SELECT branch, region, n_total FROM (SELECT region, branch, sum(n) AS n_total FROM {c}.{s}.acc"
     " GROUP BY branch, region)", "v_all"),
    ("SELECT branch, max(n) - min(n), sum(n) / count(*) FROM {c}.{s}.acc WHERE region = 'r2' GROUP BY branch",
     "v_all"),
    ("SELECT count(*), avg(n) FROM {c}.{s}.acc WHERE branch BETWEEN 1 AND 4", "v_all"),
    ("SELECT count(*), count(n), sum(balance), avg(balance), min(n), avg(n) FROM {c}.{s}.acc WHERE region = 'zz'",
     "v_all"),
    ("SELECT upper(region), count(*) FROM {c}.{s}.acc WHERE balance >= 50 GROUP BY upper(region)", "v_big"),
    ("SELECT region, sum(balance) FROM {c}.{s}.acc WHERE balance >= 50 AND region IN ('r1', 'r7')"
     " GROUP BY region HAVING sum(balance) > 0", "v_big"),
    ("SELECT region, branch, count(*) FROM {c}.{s}.acc WHERE balance >= 50 GROUP BY region, branch", None),
    ("SELECT region, min(balance) FROM {c}.{s}.acc GROUP BY region", None),
    ("SELECT region, count(*) FROM {c}.{s}.acc WHERE n > 3 GROUP BY region", None),
    ("SELECT n, count(*) FROM {c}.{s}.acc GROUP BY n", None),
    ("SELECT region, count(DISTINCT n) FROM {c}.{s}.acc GROUP BY region", None),
    ("SELECT region, count(DISTINCT branch), min(branch), max(region), avg(DISTINCT branch) FROM {c}.{s}.acc"
     " GROUP BY region", "v_all"),
    ("SELECT count(DISTINCT region, branch), max(branch) FROM {c}.{s}.acc WHERE branch > 2", "v_all"),
    ("SELECT min(region), count(DISTINCT upper(region)) FROM {c}.{s}.acc WHERE balance >= 50", "v_big"),
    ("SELECT region, sum(n) FILTER (WHERE branch > 2) FROM {c}.{s}.acc GROUP BY region", None),
    ("SELECT region, count(*) FROM {c}.{s}.acc FOR VERSION AS OF {seq} GROUP BY region", "v_all"),
]


def _which_aggregates_a_view_answers(workspace, spark, catalog, views):
    seq = workspace.table("acc").max_safe_seq
    for sql, view in CASES:
        sql = sql.format(c=catalog, s=views, seq=seq)
        on, plan = _run(spark, sql, True)
        off, _ = _run(spark, sql, False)
        assert on == off, sql
        assert (f"{catalog}.views.{view}" in plan) if view else not _read_view(catalog, plan), plan
    # Without ANSI, Spark's SUM of integers wraps around on overflow where the view's exact sum
    # would not: left to the table.
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        _, plan = _run(spark, f"SELECT region, sum(n) FROM {catalog}.{views}.acc GROUP BY region", True)
        assert not _read_view(catalog, plan), plan
        _, plan = _run(spark, f"SELECT region, sum(balance) FROM {catalog}.{views}.acc GROUP BY region", True)
        assert _read_view(catalog, plan), plan
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
    # A catalog pinned to a seq (as `htap verify` replays queries) reads a view built by then.
    pinned = f"{catalog}_pinned"
    spark.conf.set(f"spark.sql.catalog.{pinned}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{pinned}.config", str(workspace.config))
    with workspace.store() as store:
        since = store.get_view(workspace.source, "v_all").table.copy_seq
    for at, reads_view in ((seq, True), (since - 1, False)):
        spark.conf.set(f"spark.sql.catalog.{pinned}.as_of_seq", str(at))
        sql = f"SELECT region, sum(n), avg(balance) FROM {pinned}.{views}.acc GROUP BY region"
        plan = spark.sql(sql)._jdf.queryExecution().optimizedPlan().toString()
        assert (f"{pinned}.views.v_all" in plan) == reads_view, plan
        if reads_view:
            assert _run(spark, sql, True)[0] == _run(spark, sql, False)[0]
    # `htap verify` replays queries at one seq on both sides: the replica side reads the views.
    from htap.conf import load_config
    from htap.verify.replay import ReplayOptions, run_replay

    log = workspace.root / "queries.sql"
    log.write_text(f"SELECT region, sum(balance), avg(balance), count(*) FROM {views}.acc GROUP BY region;\n"
                   f"SELECT branch, max(n) - min(n) FROM {views}.acc WHERE region = 'r2' GROUP BY branch;\n"
                   f"SELECT upper(region), count(*) FROM {views}.acc WHERE balance >= 50 GROUP BY upper(region);\n")

    def view_scans() -> list:
        with workspace.store() as store:
            return [s for v in ("v_all", "v_big") for s in store.recent_scans(store.get_view(workspace.source, v).table.id)]

    before = max(s.at for s in view_scans())
    spark.conf.set("spark.htap.viewRewrite", "true")
    assert run_replay(load_config(workspace.config), [str(log)], ReplayOptions(out=workspace.root / "replay"),
                      spark=spark) == 0
    report = json.loads((workspace.root / "replay" / "replay.json").read_text())
    assert report["counts"] == {"agree": 3, "mismatch": 0, "error": 0}, report
    assert len([s for s in view_scans() if s.at > before and s.route == "replica"]) >= 3
    # The service's in-memory tail has the table's newest changes, not its views'.
    spark.conf.set("spark.htap.readTail", "true")
    try:
        _, plan = _run(spark, f"SELECT region, count(*) FROM {catalog}.{views}.acc GROUP BY region", True)
        assert not _read_view(catalog, plan), plan
    finally:
        spark.conf.unset("spark.htap.readTail")


def _time_travel_reads_the_view_at_that_seq(workspace, spark, catalog, views):
    """`FOR VERSION|TIMESTAMP AS OF` reads of the table answered from its view, as of then; a
    time no checkpoint has passed yet, or a seq before the view was built, reads the table."""
    ws = workspace
    first, then = ws.first
    with ws.store() as store:
        since = store.get_view(ws.source, "v_all").table.copy_seq
        when = store.time_of(ws.source, first)
    past = f"SELECT region, count(*), sum(balance) FROM {catalog}.{views}.acc FOR VERSION AS OF {first} GROUP BY region"
    got, plan = _run(spark, past, True)
    assert _read_view(catalog, plan), plan
    assert got == then != _run(spark, past.replace(f" FOR VERSION AS OF {first}", ""), True)[0]
    assert _run(spark, past, False)[0] == then
    # By time: a time a later checkpoint has passed is fixed, and reads the view at its seq.
    stamp = f"timestamp_micros({int(when * 1e6) + 1})"
    past_time = past.replace(f"VERSION AS OF {first}", f"TIMESTAMP AS OF {stamp}")
    got, plan = _run(spark, past_time, True)
    assert _read_view(catalog, plan), plan
    assert got == _run(spark, past_time, False)[0]
    # A time no checkpoint has passed yet would read a newer seq each time: the table answers.
    now = past.replace(f"VERSION AS OF {first}", "TIMESTAMP AS OF current_timestamp() + INTERVAL 1 HOUR")
    got, plan = _run(spark, now, True)
    assert not _read_view(catalog, plan), plan
    assert got == _run(spark, now, False)[0]
    # Before the view was built: the table answers.
    early = past.replace(f"AS OF {first}", f"AS OF {since - 1}")
    assert f"{catalog}.views." not in spark.sql(early)._jdf.queryExecution().optimizedPlan().toString()
    # The view itself has no time travel in Spark: the error gives the query that does it.
    with pytest.raises(Exception) as refused:
        spark.sql(f"SELECT * FROM {catalog}.views.v_big VERSION AS OF {first}").collect()
    message = str(refused.value)
    assert "no time travel on a view" in message, message
    suggested = message[message.index("SELECT "):].splitlines()[0]
    assert f"VERSION AS OF '{first}'" in suggested, suggested
    got, plan = _run(spark, suggested, True)
    assert _read_view(catalog, plan), plan
    assert got == _run(spark, suggested, False)[0]
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {catalog}.views.no_such_view VERSION AS OF {first}").collect()


def _failed_over_table_answers_its_views_from_the_source(workspace, spark, catalog, views):
    s = views
    ws = workspace
    expected, _ = _run(spark, f"SELECT region, cnt, total FROM {catalog}.views.v_big", True)
    ws.htap("failover", f"{s}.acc", "on")
    got, plan = _run(spark, f"SELECT region, cnt, total FROM {catalog}.views.v_big", True)
    assert not _read_view(catalog, plan), plan
    assert got == expected
    ws.htap("failover", f"{s}.acc", "off")


def test_under_writes_a_view_answers_as_its_table_at_each_snapshot(workspace, spark, catalog, views):
    """Writers never stop; each read is ONE Spark query holding both answers at one snapshot:
    the aggregate answered from the view and the same aggregate computed from the table (a
    conjunct over `id`, true for every row, keeps the rule off that side). Their symmetric
    difference must be empty every time."""
    s = views
    ws = workspace
    pick = ("region, count(*) AS c, sum(balance) AS s, avg(balance) AS a, count(balance) AS k"
            " FROM {c}.{s}.acc WHERE balance >= 50{extra} GROUP BY region")
    from_view = "SELECT " + pick.format(c=catalog, s=s, extra="")
    from_table = "SELECT " + pick.format(c=catalog, s=s, extra=" AND id > -1")
    both = f"({from_view} EXCEPT ALL {from_table}) UNION ALL ({from_table} EXCEPT ALL {from_view})"
    spark.conf.set("spark.htap.viewRewrite", "true")
    plan = spark.sql(both)._jdf.queryExecution().executedPlan().toString()
    assert f"{catalog}.views.v_big" in plan and f"{catalog}.{s}.acc" in plan, plan
    seqs = set()
    with account_writers(s, ids=400, step=90, branches=8, inserted_balance="75.5"):
        for _ in range(6):
            before = ws.table("acc").max_safe_seq
            assert spark.sql(both).collect() == []
            wait_until(lambda: ws.table("acc").max_safe_seq > before, None, "the table to take more changes")
            seqs.add(before)
    assert len(seqs) == 6
