"""Issue 31, views over joins: a view of a table joined with dimension tables of the same source
by their primary keys is built and kept from the changes of all three tables. Random batches move
sales between stores and products, change a store's region (every sale of the store changes
group), delete and re-insert dimension rows (their sales leave and rejoin the inner join), change
keys and truncate a dimension with new rows in one transaction, across a kill -9 of the service;
after each, the view's stored states equal Postgres's own aggregate of the join, and `htap verify
data`'s view check (the join aggregated afresh from the replica at the view's seq) agrees. Spark
reads the view as its SQL over the catalog's tables. Joins it cannot keep are refused."""

from __future__ import annotations

import random
import signal
from decimal import Decimal

import pytest

from htap.conf import load_config
from htap.replica.table_reads import read_at
from htap.replica.warehouse import open_warehouse
from htap.verify.views import verify_views

from workspace import wait_until

TABLES = ("sales", "stores", "products")


@pytest.fixture
def shop(workspace):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.stores (id int PRIMARY KEY, region text, size int)")
    ws.sql(f"CREATE TABLE {s}.products (id int PRIMARY KEY, category text)")
    ws.sql(f"CREATE TABLE {s}.sales (id int PRIMARY KEY, store_id int, product_id int, amount numeric(12,2), qty int)")
    ws.sql(f"INSERT INTO {s}.stores SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'r' || (g % 3) END, g FROM generate_series(1, 12) g")
    ws.sql(f"INSERT INTO {s}.products SELECT g, 'c' || (g % 4) FROM generate_series(1, 20) g")
    ws.sql(f"INSERT INTO {s}.sales SELECT g, g % 14, g % 22, (g * 37 % 1000) / 4.0, CASE WHEN g % 6 = 0 THEN NULL"
           f" ELSE g % 9 END FROM generate_series(1, 400) g")  # (store 13, product 21: no such rows, yet)
    for t in TABLES:
        ws.htap("tables", "add", f"{s}.{t}")
    ws.start_service()
    for t in TABLES:
        ws.wait_readable(t)
    return s


VIEW = ("SELECT st.region, p.category, count(*) AS sales, sum(f.amount) AS revenue, avg(qty), min(f.qty),"
        " max(amount), count(f.qty) FROM {s}.sales f JOIN {s}.stores st ON f.store_id = st.id"
        " JOIN {s}.products p ON p.id = f.product_id WHERE st.size < 11 GROUP BY st.region, p.category")
GROUPS = ("st__region", "p__category")


def _view(ws, name: str):
    with ws.store() as store:
        return store.get_view(ws.source, name)


def _plain(v):
    return int(v) if isinstance(v, Decimal) and v == v.to_integral_value() and v.as_tuple().exponent >= 0 else v


def _stored(ws, name: str) -> dict:
    view = _view(ws, name)
    states = [s.name for s in view.definition.states]
    with ws.store() as store:
        rows = read_at(open_warehouse(load_config(ws.config)), store, view.table, view.table.max_safe_seq,
                       [*GROUPS, *states], "test").to_pylist()
    return {tuple(r[g] for g in GROUPS): tuple(_plain(r[s]) for s in states) for r in rows}


def _expected(ws, name: str) -> dict:
    """Postgres's own aggregate of the join, by group, state by state."""
    view = _view(ws, name)
    s = ws.schema
    picks = ", ".join("count(*)" if x.arg is None else f'{x.fn}("{x.arg}")' for x in view.definition.states)
    with ws.pg.cursor() as cur:
        cur.execute(f"SELECT st__region, p__category, {picks} FROM (SELECT f.*, st.region AS st__region, st.size AS"
                    f" st__size, p.category AS p__category FROM {s}.sales f JOIN {s}.stores st ON f.store_id = st.id"
                    f" JOIN {s}.products p ON p.id = f.product_id) v WHERE {view.definition.filter_sql}"
                    f" GROUP BY st__region, p__category")
        return {r[:2]: tuple(_plain(v) for v in r[2:]) for r in cur.fetchall()}


def _changes(ws, rng: random.Random, next_id: list[int]) -> None:
    s = ws.schema
    for _ in range(rng.randint(4, 12)):
        kind = rng.choice(["sale", "sale", "move", "value", "delete", "rekey", "region", "category", "store_out",
                           "store_in", "product_swap"])
        k = rng.randint(1, next_id[0])
        if kind == "sale":
            next_id[0] += 1
            ws.sql(f"INSERT INTO {s}.sales VALUES (%s, %s, %s, %s, %s)",
                   (next_id[0], rng.randint(0, 14), rng.randint(0, 22), Decimal(rng.randint(-500, 99999)) / 100,
                    rng.choice([None, rng.randint(-3, 30)])))
        elif kind == "move":
            ws.sql(f"UPDATE {s}.sales SET store_id = %s, product_id = %s WHERE id = %s",
                   (rng.randint(0, 14), rng.randint(0, 22), k))
        elif kind == "value":
            ws.sql(f"UPDATE {s}.sales SET amount = amount + 1, qty = %s WHERE id %% 17 = %s",
                   (rng.choice([None, rng.randint(-50, 50)]), k % 17))
        elif kind == "delete":
            ws.sql(f"DELETE FROM {s}.sales WHERE id = %s OR id %% 41 = %s", (k, k % 41))
        elif kind == "rekey":
            next_id[0] += 1
            ws.sql(f"UPDATE {s}.sales SET id = %s WHERE id = %s", (next_id[0], k))
        elif kind == "region":  # every sale of the store changes group
            ws.sql(f"UPDATE {s}.stores SET region = %s, size = %s WHERE id = %s",
                   (rng.choice(["r0", "r1", "r7", None]), rng.randint(5, 14), rng.randint(1, 14)))
        elif kind == "category":
            ws.sql(f"UPDATE {s}.products SET category = %s WHERE id = %s", (rng.choice(["c0", "c9", None]), rng.randint(1, 22)))
        elif kind == "store_out":  # its sales leave the inner join
            ws.sql(f"DELETE FROM {s}.stores WHERE id = %s", (rng.randint(1, 14),))
        elif kind == "store_in":  # ... and rejoin it
            ws.sql(f"INSERT INTO {s}.stores VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
                   (rng.randint(1, 14), rng.choice(["r0", "r2", None]), rng.randint(1, 14)))
        else:  # a product's key changes: its sales lose it, a dangling product_id finds it
            new = rng.randint(23, 40)
            ws.sql(f"UPDATE {s}.products SET id = %s WHERE id = %s AND NOT EXISTS (SELECT 1 FROM {s}.products"
                   f" WHERE id = %s)", (new, rng.randint(1, 22), new))
            ws.sql(f"UPDATE {s}.sales SET product_id = %s WHERE id %% 29 = %s", (new, k % 29))


def _agrees(ws, name: str) -> int:
    ws.wait_caught_up("sales")
    seq = max(ws.table(t).max_safe_seq for t in TABLES)
    wait_until(lambda: (_view(ws, name).table.max_safe_seq or -1) >= seq, None, f"view {name} to reach seq {seq}")
    assert _stored(ws, name) == _expected(ws, name)
    at = _view(ws, name).table.max_safe_seq
    with ws.store() as store:
        [report] = verify_views(load_config(ws.config), store, [ws.table("sales")], at, 60.0, 5)
    assert report["ok"] and report["groups"], report
    return at


@pytest.mark.pg
@pytest.mark.spark
def test_a_view_over_a_join_is_kept_from_the_changes_of_every_table(workspace, shop, spark, catalog):
    ws = workspace
    s = shop
    for sql, reason in {  # (every refusal: tests/unit/test_view_definitions.py)
        f"SELECT st.region, count(*) FROM {s}.sales f LEFT JOIN {s}.stores st ON f.store_id = st.id GROUP BY st.region":
            "only an inner JOIN",
        f"SELECT st.region, count(*) FROM {s}.sales f JOIN {s}.stores st ON f.qty = st.size GROUP BY st.region":
            "must cover its primary key (id)",
    }.items():
        r = ws.htap("views", "create", "v", "--sql", sql, check=False)
        assert r.returncode != 0 and reason in r.stderr, (sql, r.stderr)
    ws.htap("views", "create", "by_region", "--sql", VIEW.format(s=s))
    wait_until(lambda: _view(ws, "by_region").table.readable, None, "view by_region to be built")
    definition = _view(ws, "by_region").definition
    assert [d.table for d in definition.dimensions] == [f"{s}.stores", f"{s}.products"]
    seqs = {_agrees(ws, "by_region")}
    rng, next_id = random.Random(47), [400]
    for batch in range(7):
        _changes(ws, rng, next_id)
        if batch == 2:  # a dimension truncated and refilled in one transaction: the view is emptied, then refilled
            with ws.pg.cursor() as cur:
                cur.execute(f"BEGIN; TRUNCATE {s}.stores; INSERT INTO {s}.stores SELECT g, 'r' || (g % 2), g"
                            f" FROM generate_series(1, 9) g; COMMIT")
        if batch == 4:  # killed between checkpoints, or during one
            ws.stop_service(signal.SIGKILL)
            _changes(ws, rng, next_id)
            ws.start_service()
        seqs.add(_agrees(ws, "by_region"))
    assert len(seqs) >= 6

    # Spark reads it as its SQL over the catalog's tables, from the view's states
    rows, plan = _run(spark, f"SELECT * FROM {catalog}.views.by_region", True)
    assert f"{catalog}.views.by_region" in plan, plan
    assert {(r[0], r[1]): r[2] for r in rows} == {g: v[0] for g, v in _expected(ws, "by_region").items()}
    _spark_answers_joins_from_the_view(spark, catalog, s)
    _time_travel_of_the_join_reads_the_view_then(spark, catalog, s, sorted(seqs)[len(seqs) // 2])

    guarded = ws.htap("tables", "remove", f"{s}.products", check=False)
    assert guarded.returncode != 0 and "views by_region aggregate" in guarded.stderr, guarded.stderr


def _run(spark, sql: str, rewrite: bool) -> tuple[list, str]:
    spark.conf.set("spark.htap.viewRewrite", str(rewrite).lower())
    try:
        df = spark.sql(sql)
        plan = df._jdf.queryExecution().executedPlan().toString()
        return sorted((tuple(v.normalize() if isinstance(v, Decimal) else v for v in r) for r in df.collect()),
                      key=repr), plan
    finally:
        spark.conf.unset("spark.htap.viewRewrite")


def _spark_answers_joins_from_the_view(spark, catalog, s):
    """Aggregates over the same join that the view answers (its join and filter, coarser groups,
    conjuncts over groups, the join written the other way round) read its states; others (another
    join condition, a dimension left out, a filter on a column it does not group by) read the
    tables. Every answer equals the one with the rule off."""
    t = {name: f"{catalog}.{s}.{name}" for name in TABLES}
    join = (f"FROM {t['sales']} f JOIN {t['stores']} st ON f.store_id = st.id JOIN {t['products']} p"
            f" ON p.id = f.product_id")
    answered = [
        f"SELECT st.region, count(*), sum(f.amount), avg(f.qty), max(f.amount) {join} WHERE st.size < 11"
        f" GROUP BY st.region",
        f"SELECT p.category, st.region, min(qty) {join} WHERE st.size < 11 AND p.category IN ('c0', 'c1')"
        f" GROUP BY p.category, st.region",
        f"SELECT upper(st.region), count(qty) FROM {t['products']} p JOIN {t['sales']} f ON f.product_id = p.id"
        f" JOIN {t['stores']} st ON st.id = f.store_id WHERE st.size < 11 GROUP BY upper(st.region)",
    ]
    left = [
        f"SELECT st.region, count(*) {join} WHERE st.size < 12 GROUP BY st.region",  # not the view's filter
        f"SELECT st.region, count(*) {join} WHERE st.size < 11 AND f.qty > 3 GROUP BY st.region",  # not a group
        f"SELECT st.region, count(*) FROM {t['sales']} f JOIN {t['stores']} st ON f.store_id = st.id"
        f" WHERE st.size < 11 GROUP BY st.region",  # a dimension left out
        f"SELECT st.region, count(*) FROM {t['sales']} f JOIN {t['stores']} st ON f.product_id = st.id"
        f" JOIN {t['products']} p ON p.id = f.product_id WHERE st.size < 11 GROUP BY st.region",  # another join
        f"SELECT st.region, count(*) FROM {t['sales']} f LEFT JOIN {t['stores']} st ON f.store_id = st.id"
        f" JOIN {t['products']} p ON p.id = f.product_id WHERE st.size < 11 OR st.size IS NULL GROUP BY st.region",
    ]
    for sql in answered + left:
        on, plan = _run(spark, sql, True)
        off, _ = _run(spark, sql, False)
        assert on == off, sql
        assert (f"{catalog}.views.by_region" in plan) == (sql in answered), (sql, plan)


def _time_travel_of_the_join_reads_the_view_then(spark, catalog, s, seq: int):
    """Every table of the join `FOR VERSION AS OF` one past seq: answered from the view's groups
    then; the tables at different seqs: from the tables."""
    def at(name: str, version: int) -> str:
        return f"{catalog}.{s}.{name} FOR VERSION AS OF {version}"

    def query(stores_at: int) -> str:
        return (f"SELECT st.region, count(*), sum(f.amount) FROM {at('sales', seq)} f JOIN {at('stores', stores_at)} st"
                f" ON f.store_id = st.id JOIN {at('products', seq)} p ON p.id = f.product_id WHERE st.size < 11"
                f" GROUP BY st.region")

    answers = []
    for stores_at, from_view in ((seq, True), (seq + 1, False)):
        on, plan = _run(spark, query(stores_at), True)
        assert (f"{catalog}.views.by_region" in plan) == from_view, plan
        assert on == _run(spark, query(stores_at), False)[0]
        answers.append(on)
    now, _ = _run(spark, query(seq).replace(f" FOR VERSION AS OF {seq}", ""), True)
    assert answers[0] != now  # (the seq is in the past: the answer is then's)
