"""Issue 31, views kept by the service: `htap views create` defines an aggregate view of an HTAP
table; `htap serve` builds it from the table at a checkpoint and then keeps it in the same
metadata transaction as the table's changes. After every batch of random changes (updates that
move rows between groups, NULL groups and values, deletes, key changes, TRUNCATE with inserts in
one transaction), across a kill -9 of the service and a rebuild, the view's stored states equal
the source's own aggregate."""

from __future__ import annotations

import dataclasses
import json
import random
import signal
from decimal import Decimal

import pytest


from htap.conf import load_config
from htap.replica.table_reads import read_at
from htap.replica.warehouse import open_warehouse
from htap.verify.views import verify_views

from account_writers import account_writers
from conftest import tune
from workspace import wait_until

GROUPS = ("region", "branch")


@pytest.fixture
def accounts(workspace):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.acc (id int PRIMARY KEY, branch int, region text, balance numeric(12,2), n int)")
    ws.sql(f"INSERT INTO {s}.acc SELECT g, g % 11, CASE WHEN g % 7 = 0 THEN NULL ELSE 'r' || (g % 3) END,"
           f" (g * 37 % 1000) / 4.0, CASE WHEN g % 5 = 0 THEN NULL ELSE g % 13 END FROM generate_series(1, 300) g")
    ws.htap("tables", "add", f"{s}.acc")
    ws.start_service()
    ws.wait_readable("acc")
    return s


def _view(ws, name: str):
    with ws.store() as store:
        return store.get_view(ws.source, name)


def _stored(ws, name: str) -> tuple[int, dict]:
    """The view's states at its newest seq, by group."""
    view = _view(ws, name)
    states = [s.name for s in view.definition.states]
    cfg = load_config(ws.config)
    with ws.store() as store:
        out = [tuple(r.values()) for r in read_at(open_warehouse(cfg), store, view.table, view.table.max_safe_seq,
                                                  [*GROUPS, *states], "test").to_pylist()]
    return view.table.max_safe_seq, {r[:2]: tuple(_plain(v) for v in r[2:]) for r in out}


def _expected(ws, name: str, where: str) -> dict:
    """The same states computed by the source over its rows now."""
    view = _view(ws, name)
    picks = ", ".join("count(*)" if s.arg is None else f"{s.fn}({s.arg})" for s in view.definition.states)
    with ws.pg.cursor() as cur:
        cur.execute(f"SELECT region, branch, {picks} FROM {ws.schema}.acc WHERE {where} GROUP BY region, branch")
        return {r[:2]: tuple(_plain(v) for v in r[2:]) for r in cur.fetchall()}


def _plain(v):
    return int(v) if isinstance(v, Decimal) and v == v.to_integral_value() and v.as_tuple().exponent >= 0 else v


def _changes(ws, rng: random.Random, next_id: list[int]) -> None:
    s = ws.schema
    for _ in range(rng.randint(3, 12)):
        kind = rng.choice(["insert", "insert", "move", "value", "delete", "rekey", "nulls"])
        k = rng.randint(1, next_id[0])
        if kind == "insert":
            next_id[0] += 1
            ws.sql(f"INSERT INTO {s}.acc VALUES (%s, %s, %s, %s, %s)",
                   (next_id[0], rng.randint(0, 10), rng.choice(["r0", "r1", "r2", None]),
                    Decimal(rng.randint(-500, 99999)) / 100, rng.choice([None, rng.randint(-3, 30)])))
        elif kind == "move":
            ws.sql(f"UPDATE {s}.acc SET branch = %s, region = %s WHERE id = %s",
                   (rng.randint(0, 10), rng.choice(["r0", "r1", "r9", None]), k))
        elif kind == "value":
            ws.sql(f"UPDATE {s}.acc SET balance = balance + 1, n = %s WHERE id %% 17 = %s",
                   (rng.choice([None, rng.randint(-50, 50)]), k % 17))
        elif kind == "delete":
            ws.sql(f"DELETE FROM {s}.acc WHERE id = %s OR id %% 23 = %s", (k, k % 23))
        elif kind == "rekey":
            next_id[0] += 1
            ws.sql(f"UPDATE {s}.acc SET id = %s WHERE id = %s", (next_id[0], k))
        else:
            ws.sql(f"UPDATE {s}.acc SET region = NULL, n = NULL WHERE id %% 31 = %s", (k % 31,))


def _agrees(ws, name: str, where: str) -> None:
    ws.wait_caught_up("acc")
    seq = ws.table("acc").max_safe_seq
    wait_until(lambda: (_view(ws, name).table.max_safe_seq or -1) >= seq, None, f"view {name} to reach seq {seq}")
    at, got = _stored(ws, name)
    assert got == _expected(ws, name, where), at


def test_a_view_is_built_and_kept_equal_to_the_sources_aggregate(workspace, accounts):
    ws = workspace
    s = accounts
    sql = (f"SELECT region, branch, count(*) AS n_rows, count(n), sum(balance) AS total, avg(n), min(balance),"
           f" max(n) FROM {s}.acc WHERE branch < 8 GROUP BY region, branch")
    ws.htap("views", "create", "by_branch", "--sql", sql)
    wait_until(lambda: _view(ws, "by_branch").table.readable, None, "view by_branch to be built")
    assert {c.name for c in _view(ws, "by_branch").table.columns} >= {"_group", "region", "branch", "_rows",
                                                                         "_sum_balance", "_min_balance", "_max_n"}
    _agrees(ws, "by_branch", "branch < 8")
    rng, next_id = random.Random(31), [300]
    for batch in range(6):
        _changes(ws, rng, next_id)
        if batch == 2:  # TRUNCATE and new rows in one transaction: the view is emptied at its seq too
            with ws.pg.cursor() as cur:
                cur.execute(f"BEGIN; TRUNCATE {s}.acc; INSERT INTO {s}.acc SELECT g, g % 4, 'r' || (g % 2), g, g"
                            f" FROM generate_series(1, 40) g; COMMIT")
            next_id[0] = max(next_id[0], 40)
        if batch == 4:  # killed between checkpoints, or during one: the view resumes where the table does
            ws.stop_service(signal.SIGKILL)
            _changes(ws, rng, next_id)
            ws.start_service()
        _agrees(ws, "by_branch", "branch < 8")
    ws.htap("views", "rebuild", "by_branch")
    wait_until(lambda: _view(ws, "by_branch").table.readable, None, "view by_branch to be built again")
    _agrees(ws, "by_branch", "branch < 8")
    with ws.store() as store:  # as a service killed in the middle of building it leaves it
        store.start_copy(_view(ws, "by_branch").table.id)
    wait_until(lambda: _view(ws, "by_branch").table.readable, None, "an interrupted build to be done again")
    _agrees(ws, "by_branch", "branch < 8")
    listed = ws.htap("views", "list").stdout
    assert "views.by_branch\tstreaming\tof " + f"{s}.acc" in listed, listed
    assert "views.by_branch" in ws.htap("status").stdout
    # `htap verify data` checks the view against its table's replica at the snapshot it checks the table at
    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 0 and "views.by_branch" in r.stdout and "groups of" in r.stdout, r.stdout + r.stderr
    report = json.loads((ws.root / "verify" / "data.json").read_text())
    assert [(v["view"], v["ok"]) for v in report["views"]] == [("views.by_branch", True)] and report["views"][0]["groups"]
    view = _view(ws, "by_branch")  # a view kept wrong (here: its definition altered behind its back) is caught
    with ws.store() as store, store.transaction():
        store._x("UPDATE views SET definition = ? WHERE table_id = ?",
                 (dataclasses.replace(view.definition, filter_sql="branch < 8 AND n > 3").to_json(), view.table.id))
    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout + r.stderr
    bad = json.loads((ws.root / "verify" / "data.json").read_text())["views"][0]
    assert not bad["ok"] and bad["different_count"] and bad["different"][0]["states"], bad


def test_views_refuse_what_they_cannot_keep_and_guard_their_table(workspace, accounts):
    ws = workspace
    s = accounts
    bad = ws.htap("views", "create", "v", "--sql", f"SELECT region, sum(n * 2) FROM {s}.acc GROUP BY region", check=False)
    assert bad.returncode != 0 and "must be a column of the table" in bad.stderr, bad.stderr
    unknown = ws.htap("views", "create", "v", "--sql", f"SELECT region, count(*) FROM {s}.nope GROUP BY region",
                      check=False)
    assert unknown.returncode != 0 and f"htap tables add {s}.nope" in unknown.stderr, unknown.stderr
    ws.htap("views", "create", "v", "--sql", f"SELECT region, count(*) FROM {s}.acc GROUP BY region")
    again = ws.htap("views", "create", "v", "--sql", f"SELECT branch, count(*) FROM {s}.acc GROUP BY branch", check=False)
    assert again.returncode != 0 and "already exists" in again.stderr, again.stderr
    guarded = ws.htap("tables", "remove", f"{s}.acc", check=False)
    assert guarded.returncode != 0 and "views v aggregate" in guarded.stderr, guarded.stderr
    ws.htap("views", "drop", "v")
    assert ws.htap("views", "list").stdout.strip() == ""
    ws.htap("tables", "remove", f"{s}.acc")


def test_a_view_under_load_equals_its_table_at_every_seq_read_across_kill_and_compaction(workspace, accounts):
    """Writers never stop; each round reads the view at its newest seq and compares it with the
    aggregate of the table's replica at that same seq (verify data's view check: the table's
    replica equals the source, tested on its own). The service is killed once and the view's
    deltas are compacted (max_deltas 2) along the way; at the end, quiet, it equals Postgres."""
    ws = workspace
    s = accounts
    ws.stop_service()
    tune(ws, compaction_interval_s=0.3, max_deltas=2, flush_interval_s=0.05)
    ws.start_service()
    ws.htap("views", "create", "by_branch", "--sql", f"SELECT region, branch, count(*), sum(balance), min(balance),"
                                                     f" max(n), count(n) FROM {s}.acc GROUP BY region, branch")
    wait_until(lambda: _view(ws, "by_branch").table.readable, None, "view by_branch to be built")
    cfg = load_config(ws.config)
    checked = set()
    with account_writers(s):
        for round_ in range(12):
            if round_ == 5:
                ws.stop_service(signal.SIGKILL)
                ws.start_service()
            seq = ws.table("acc").max_safe_seq
            wait_until(lambda: (_view(ws, "by_branch").table.max_safe_seq or -1) > seq, None, "the view to move on")
            at = _view(ws, "by_branch").table.max_safe_seq
            with ws.store() as store:
                [report] = verify_views(cfg, store, [ws.table("acc")], at, 60.0, 5)
            assert report["ok"] and report["groups"], report
            checked.add(at)
    assert len(checked) >= 10
    assert "compaction of views.by_branch" in ws.log()  # the view's deltas were merged meanwhile
    _agrees(ws, "by_branch", "true")
