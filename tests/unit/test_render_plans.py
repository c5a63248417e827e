"""rewrite/render.py, whole pushed plans (joins pushed into a scan, whole subtrees of the query):
golden SQL for DuckDB, Postgres and MySQL, and the DuckDB SQL run over in-memory tables against
hand-written expectations — inner/outer/null-safe joins with NULL keys and duplicate column names,
semi and anti joins (NOT IN's null-aware condition with NULL keys on either side), existence
joins, aggregates between joins, scalar subqueries, windows, unions, grouping sets, top-N — and
malformed plans rejected with PlanError."""

from __future__ import annotations

from decimal import Decimal

import pytest
from decimal_support import avg_of, spark_avg, unscaled_decimals
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp
from unit_support import check_golden

from htap import engine
from htap.rewrite import dialects, render
from htap.rewrite.dialects import REPLICA
from htap.rewrite.pushed import PlanError, PushedPlan


def c(name: str, type: str = "bigint") -> dict:
    return {"col": name, "type": type}


def lit(v, type: str = "bigint") -> dict:
    return {"lit": {"type": "null" if v is None else "long", "value": v}, "type": type}


def op(name: str, *args: dict, type: str = "boolean") -> dict:
    return {"op": name, "type": type, "args": list(args)}


def agg(fn: str, *args: dict, type: str = "bigint", distinct: bool = False) -> dict:
    return {"agg": fn, "distinct": distinct, "args": list(args), "type": type}


def named(**exprs: dict) -> list[dict]:
    return [{"name": n, "expr": e} for n, e in exprs.items()]


def key(expr: dict, asc: bool = True, nulls_first: bool = True) -> dict:
    return {"expr": expr, "asc": asc, "nulls_first": nulls_first}


def scan(table: str, columns: list[str], filter: list | None = None) -> dict:
    return {"table": table, "columns": columns, "filter": filter or []}


def node(k: int, *names: str) -> dict:
    return {"node": "scan", "scan": k, "output": list(names)}


def join(kind: str, left: dict, right: dict, on: dict | None = None, **extra) -> dict:
    out = {"node": "join", "type": kind, "left": left, "right": right, **extra}
    if on is not None:
        out["on"] = on
    return out


def project(child: dict, **exprs: dict) -> dict:
    return {"node": "project", "child": child, "exprs": named(**exprs)}


def plan(root: dict, scans: list[dict], split: int | None = None) -> dict:
    out = {"ir": 2, "scans": scans, "root": root}
    if split is not None:
        out["split"] = split
    return out


# --- joins pushed into a scan (schema j) ------------------------------------------------------------

J_COLUMNS = {"j.a": ["id", "name", "k"], "j.b": ["id", "name", "a_id", "v"], "j.c": ["b_id", "w"]}
JA = node(0, "c1", "c2")  # j.a: id, name
JB = node(1, "c3", "c4", "c5")  # j.b: id, name, a_id
A_B = join("inner", JA, JB, op("=", c("c1"), c("c5")))
A_B_SCANS = [scan("j.a", ["id", "name"]), scan("j.b", ["id", "name", "a_id"])]

JOIN_CASES: dict[str, dict] = {
    "inner join, duplicate names": plan(project(A_B, c1=c("c1"), c2=c("c2", "string"), c3=c("c3"), c4=c("c4", "string")),
                                        A_B_SCANS, split=0),
    "left join with a filter on the right table": plan(
        project(join("left", node(0, "c1", "c2"), node(1, "c3", "c4"), op("=", c("c1"), c("c3"))), c1=c("c1"), c4=c("c4")),
        [scan("j.a", ["id", "k"]), scan("j.b", ["a_id", "v"], [op(">", c("v"), lit(10))])], split=0),
    "right join": plan(project(join("right", node(0, "c1"), node(1, "c3", "c4"), op("=", c("c1"), c("c4"))),
                               c1=c("c1"), c3=c("c3")),
                       [scan("j.a", ["id"]), scan("j.b", ["id", "a_id"])], split=1),
    "null-safe join": plan(project(join("inner", node(0, "c1", "c2"), node(1, "c3", "c4"), op("<=>", c("c2"), c("c4"))),
                                   c1=c("c1"), c3=c("c3")),
                           [scan("j.a", ["id", "k"]), scan("j.b", ["id", "a_id"])], split=0),
    "three tables, complete aggregate, top-N": plan({
        "node": "limit", "limit": 2, "keys": [key(c("c11"), False, False), key(c("c2"))], "child": {
            "node": "aggregate", "group_by": [c("c2")], "exprs": named(
                c2=c("c2"),
                c10=agg("sum", op("*", op("cast", c("c5"), type="bigint"), op("cast", c("c7"), type="bigint"), type="bigint")),
                c11=agg("count_star"), c12=agg("count", c("c3"), distinct=True)),
            "child": join("inner", join("inner", node(0, "c1", "c2"), node(1, "c3", "c4", "c5"), op("=", c("c1"), c("c4"))),
                          node(2, "c6", "c7"), op("=", c("c6"), c("c3")))}},
        [scan("j.a", ["id", "k"]), scan("j.b", ["id", "a_id", "v"]), scan("j.c", ["b_id", "w"])]),
    "top-N of joined rows, split by a table": plan({
        "node": "limit", "limit": 3, "keys": [key(c("c2", "string"), True, False), key(c("c3"), False, True)],
        "child": project(A_B, c3=c("c3"), c2=c("c2", "string"))}, A_B_SCANS, split=1),
}

# --- whole subtrees (schema s) --------------------------------------------------------------------

T_COLUMNS = {"s.a": ["id", "k", "v"], "s.b": ["id", "k", "w"], "s.d": ["k", "v"]}
A = node(0, "c1", "c2")  # a.id, a.k
B = node(1, "c3", "c4")  # b.k, b.w
NOT_IN = op("OR", op("=", c("c2"), c("c3")), op("IS_NULL", op("=", c("c2"), c("c3"))))
SCANS = [scan("s.a", ["id", "k"]), scan("s.b", ["k", "w"])]


def tree(root: dict, scans: list | None = None) -> dict:
    return plan(root, scans or SCANS)


def top(child: dict) -> dict:
    return {"node": "sort", "child": child, "keys": [key(c("c1"))]}


AVG = avg_of(c("c4", "decimal(15,2)"), 15, 2)

TREE_CASES: dict[str, dict] = {
    "semi join (IN)": tree(top(join("semi", A, B, op("=", c("c2"), c("c3"))))),
    "null-aware anti join (NOT IN)": tree(top(join("anti", A, B, NOT_IN))),
    "anti join (NOT EXISTS)": tree(top(join("anti", A, B, op("=", c("c2"), c("c3"))))),
    # Spark's optimizer pushes semi/anti joins below inner joins (TPC-H Q21): one flat SELECT, the
    # NOT EXISTS beside the join, so that the target orders the join first when it is selective.
    "NOT IN below an inner join: one flat SELECT": tree(top(join(
        "inner", join("anti", A, B, NOT_IN), {"node": "filter", "child": node(2, "c5"), "cond": op(">", c("c5"), lit(2))},
        op("=", c("c1"), c("c5")))), [*SCANS, scan("s.a", ["id"])]),
    "NOT IN over a filtered side": tree(top(join("anti", A, {"node": "filter", "child": B, "cond": op("IS_NOT_NULL", c("c3"))},
                                                 NOT_IN))),
    "aggregate between joins, scalar subquery": tree(top({
        "node": "filter",
        "cond": op(">", c("c6"), {"subquery": {"node": "aggregate", "group_by": [], "child": node(2, "c7"),
                                               "exprs": named(c8=agg("min", c("c7")))}, "type": "bigint"}),
        "child": {"node": "aggregate", "group_by": [c("c1")], "exprs": named(c1=c("c1"), c5=agg("count_star"),
                                                                             c6=agg("sum", c("c4"))),
                  "child": join("inner", A, B, op("=", c("c2"), c("c3")))}}),
        [*SCANS, scan("s.b", ["w"])]),
    "count(*) over a join: a node with no column": tree({
        "node": "aggregate", "group_by": [], "exprs": named(c9=agg("count_star")),
        "child": {"node": "project", "exprs": [], "child": join("inner", A, B, op("=", c("c2"), c("c3")))}}),
    "AVG of decimals: exact division, HALF_UP": tree({
        "node": "aggregate", "group_by": [c("c2")], "exprs": named(c2=c("c2"), c5=AVG), "child": node(0, "c2", "c4")},
        [scan("s.d", ["k", "v"])]),
    "left join, top-N": tree({"node": "limit", "limit": 3, "child": join("left", A, B, op("=", c("c2"), c("c3"))),
                              "keys": [key(c("c4"), False, False), key(c("c1"))]}),
    # MySQL/MariaDB have no FULL JOIN: sqlglot's MySQL generator spells it as a LEFT JOIN UNION ALL
    # the right side's rows with no match (a RIGHT JOIN filtered by NOT EXISTS of the condition).
    "full outer join": tree(join("full", A, B, op("=", c("c2"), c("c3")))),
    # EXISTS / IN under OR: the left's rows and whether a right row matches (Spark's ExistenceJoin)
    "existence join (IN under OR)": tree(top(project({
        "node": "filter", "child": join("existence", A, B, op("=", c("c2"), c("c3")), exists="c9"),
        "cond": op("OR", c("c9", "boolean"), op(">", c("c1"), lit(4)))}, c1=c("c1"), c2=c("c2"), c9=c("c9", "boolean")))),
    "window functions": tree(top({"node": "window", "child": node(0, "c1", "c2", "c3"), "exprs": [
        {"name": "c4", "expr": {"over": {"win": "row_number", "args": [], "type": "int"}, "partition_by": [c("c2")],
                                "order_by": [key(c("c1"))], "frame": {"kind": "rows", "lower": None, "upper": 0}, "type": "int"}},
        {"name": "c5", "expr": {"over": agg("min", c("c3")), "partition_by": [c("c2")], "order_by": [key(c("c1"))],
                                "frame": {"kind": "rows", "lower": -1, "upper": 0}, "type": "bigint"}},
        {"name": "c6", "expr": {"over": {"win": "lag", "args": [c("c3"), lit(1, "int"), lit(0)], "type": "bigint"},
                                "partition_by": [], "order_by": [key(c("c1"))], "frame": {"kind": "rows", "lower": None,
                                                                                          "upper": None}, "type": "bigint"}},
        {"name": "c7", "expr": {"over": {"win": "rank", "args": [], "type": "int"}, "partition_by": [],
                                "order_by": [key(c("c2"), True, False)], "frame": {"kind": "rows", "lower": None, "upper": 0},
                                "type": "int"}}]}), [scan("s.a", ["id", "k", "v"])]),
    "a windowed SUM over a frame": tree(top({"node": "window", "child": node(0, "c1", "c2", "c3"), "exprs": [
        {"name": "c4", "expr": {"over": agg("sum", c("c3")), "partition_by": [c("c2")], "order_by": [key(c("c1"))],
                                "frame": {"kind": "rows", "lower": -1, "upper": 0}, "type": "bigint"}},
        {"name": "c5", "expr": {"over": agg("count_star"), "partition_by": [], "order_by": [key(c("c1"))],
                                "frame": {"kind": "range", "lower": None, "upper": 0}, "type": "bigint"}}]}),
        [scan("s.a", ["id", "k", "v"])]),
    "union all": tree(top({"node": "union", "output": ["c1", "c2"], "children": [
        {"node": "filter", "child": node(0, "c5", "c6"), "cond": op("<", c("c5"), lit(3))}, node(1, "c3", "c4")]}),
        [scan("s.a", ["id", "k"]), scan("s.b", ["id", "k"])]),
    "rollup (expand), grouping sets": tree({"node": "sort", "keys": [key(c("c8")), key(c("c7"))], "child": {
        "node": "aggregate", "group_by": [c("c7"), c("c8")], "exprs": named(c7=c("c7"), c8=c("c8"), c9=agg("sum", c("c3"))),
        "child": {"node": "expand", "child": node(0, "c2", "c3"), "output": ["c7", "c8", "c3"], "projections": [
            [c("c2"), lit(0), c("c3")], [lit(None), lit(1), c("c3")]]}}}, [scan("s.a", ["k", "v"])]),
    "a self join, top-N with an offset": tree({"node": "limit", "limit": 2, "offset": 1, "keys": [key(c("c1")), key(c("c5"))],
                                               "child": join("inner", A, node(1, "c5", "c6"), op("=", c("c2"), c("c6")))},
                                              [scan("s.a", ["id", "k"]), scan("s.a", ["id", "k"], [op(">", c("id"), lit(1))])]),
}


def sql(raw: dict, dialect: str) -> str:
    p = PushedPlan.from_dict(raw)
    relations = []
    for s in p.scans:
        schema, name = s.table.split(".")
        table = exp.Table(this=exp.to_identifier(name, quoted=True), db=exp.to_identifier(schema, quoted=True))
        relations.append(render.scan_select(s, table))
    query = render.render_plan(p, relations)
    return query.sql(REPLICA) if dialect == "duckdb" else dialects.for_source(query, dialect).sql(dialect)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_golden_join_sql(dialect):
    check_golden(f"join_{dialect}.sql", {case: sql(raw, dialect) for case, raw in JOIN_CASES.items()})


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_golden_tree_sql(dialect):
    check_golden(f"tree_{dialect}.sql", {case: sql(raw, dialect) for case, raw in TREE_CASES.items()})


def test_full_join_is_no_full_join_for_mysql():
    """MariaDB parses `FULL` as a table alias and rejects the query: the MySQL text must spell it
    out (run by MariaDB in tests/test_mysql_subtree_pushdown.py)."""
    text = sql(TREE_CASES["full outer join"], "mysql")
    assert "FULL" not in text.upper() and "UNION ALL" in text and "NOT EXISTS" in text, text


# --- joins, executed ---------------------------------------------------------------------------------

JA_ROWS = [(1, "x", 1), (2, "y", None), (3, None, 3), (4, "x", None)]
JB_ROWS = [(10, "p", 1, 5), (11, "q", 1, 20), (12, None, 3, 30), (13, "r", None, 40), (14, "s", 9, 50)]
JC_ROWS = [(10, 2), (11, 3), (11, 4), (12, 1), (13, 7)]


@pytest.fixture(scope="module")
def jcon():
    con = engine.cursor()
    con.execute("CREATE SCHEMA IF NOT EXISTS j")
    for name, rows, types in (("j.a", JA_ROWS, ["BIGINT", "TEXT", "BIGINT"]), ("j.b", JB_ROWS, ["BIGINT", "TEXT", "BIGINT", "BIGINT"]),
                              ("j.c", JC_ROWS, ["BIGINT", "BIGINT"])):
        cols = ", ".join(f"{n} {t}" for n, t in zip(J_COLUMNS[name], types))
        con.execute(f"CREATE OR REPLACE TABLE {name} ({cols})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' for _ in types)})", rows)
    yield con
    con.close()


def run_join(con, case: str) -> list[tuple]:
    return con.sql(sql(JOIN_CASES[case], "duckdb")).fetchall()


def test_inner_join_drops_null_keys_and_keeps_both_columns_of_a_name(jcon):
    assert sorted(run_join(jcon, "inner join, duplicate names"), key=repr) == sorted(
        [(1, "x", 10, "p"), (1, "x", 11, "q"), (3, None, 12, None)], key=repr)


def test_left_join_keeps_unmatched_left_rows_and_filters_the_right_table_first(jcon):
    assert sorted(run_join(jcon, "left join with a filter on the right table"), key=repr) == sorted(
        [(1, 20), (2, None), (3, 30), (4, None)], key=repr)


def test_right_join_keeps_unmatched_right_rows(jcon):
    assert sorted(run_join(jcon, "right join"), key=repr) == sorted([(1, 10), (1, 11), (3, 12), (None, 13), (None, 14)], key=repr)


def test_null_safe_join_matches_null_keys(jcon):
    assert sorted(run_join(jcon, "null-safe join"), key=repr) == sorted([(1, 10), (1, 11), (3, 12), (2, 13), (4, 13)], key=repr)


def test_complete_aggregate_with_count_distinct_and_top_n(jcon):
    # k=1: b 10 (c 2) and 11 (c 3, 4): sums 5*2 + 20*3 + 20*4 = 150, 3 rows, 2 distinct b; k=3: b 12 x c 1.
    assert run_join(jcon, "three tables, complete aggregate, top-N") == [(1, 150, 3, 2), (3, 30, 1, 1)]


def test_top_n_orders_nulls_as_spark_asked(jcon):
    assert run_join(jcon, "top-N of joined rows, split by a table") == [(11, "x"), (10, "x"), (12, None)]


# --- subtrees, executed ----------------------------------------------------------------------------

A_ROWS = [(1, 1, 10), (2, None, 20), (3, 3, 30), (4, 4, 40), (5, 1, 50)]


def connect(b_rows):
    con = engine.cursor()
    con.execute("CREATE SCHEMA IF NOT EXISTS s")
    con.execute("CREATE OR REPLACE TABLE s.a (id BIGINT, k BIGINT, v BIGINT)")
    con.executemany("INSERT INTO s.a VALUES (?, ?, ?)", A_ROWS)
    con.execute("CREATE OR REPLACE TABLE s.b (id BIGINT, k BIGINT, w BIGINT)")
    if b_rows:
        con.executemany("INSERT INTO s.b VALUES (?, ?, ?)", b_rows)
    return con


def run(con, case: str) -> list[tuple]:
    return con.sql(sql(TREE_CASES[case], "duckdb")).fetchall()


def test_in_and_not_in_follow_sql_null_semantics():
    with_null = connect([(10, 1, 7), (11, 3, 8), (12, None, 9)])
    try:
        assert run(with_null, "semi join (IN)") == [(1, 1), (3, 3), (5, 1)]
        # NOT IN over a set holding NULL: no row; NOT EXISTS: the unmatched rows, NULL key included.
        assert run(with_null, "null-aware anti join (NOT IN)") == []
        assert run(with_null, "anti join (NOT EXISTS)") == [(2, None), (4, 4)]
        # Below an inner join with a's ids above 2: the same NOT IN, then the join.
        assert run(with_null, "NOT IN below an inner join: one flat SELECT") == []
        # The NULL filtered out of the set: a's NULL key still is not NOT IN (unknown).
        assert run(with_null, "NOT IN over a filtered side") == [(4, 4)]
        # EXISTS is TRUE or FALSE, never NULL (a's NULL key matches nothing); id 5 kept by the OR's other side
        assert run(with_null, "existence join (IN under OR)") == [(1, 1, True), (3, 3, True), (5, 1, True)]
    finally:
        with_null.close()
    empty = connect([])
    try:  # NOT IN over an empty set holds for every row, NULL keys included
        assert run(empty, "null-aware anti join (NOT IN)") == [(1, 1), (2, None), (3, 3), (4, 4), (5, 1)]
        assert run(empty, "NOT IN below an inner join: one flat SELECT") == [(3, 3, 3), (4, 4, 4), (5, 1, 5)]
        assert run(empty, "semi join (IN)") == []
        assert run(empty, "existence join (IN under OR)") == [(5, 1, False)]
    finally:
        empty.close()


def test_aggregate_between_joins_with_a_scalar_subquery_and_top_n():
    con = connect([(10, 1, 7), (11, 3, 8), (12, None, 9), (13, 1, 2)])
    try:
        # a joined with b on k: id 1 and 5 match b 10, 13 (w 7 + 2 = 9), id 3 matches b 11 (w 8);
        # kept: sums above min(w) = 2.
        assert run(con, "aggregate between joins, scalar subquery") == [(1, 2, 9), (3, 1, 8), (5, 2, 9)]
        assert run(con, "count(*) over a join: a node with no column") == [(5,)]
        assert run(con, "left join, top-N") == [(3, 3, 3, 8), (1, 1, 1, 7), (5, 1, 1, 7)]
        assert sorted(run(con, "full outer join"), key=repr) == sorted(
            [(1, 1, 1, 7), (1, 1, 1, 2), (5, 1, 1, 7), (5, 1, 1, 2), (3, 3, 3, 8), (2, None, None, None),
             (4, 4, None, None), (None, None, None, 9)], key=repr)
    finally:
        con.close()


def test_windows_unions_grouping_sets_and_offsets():
    con = connect([(10, 1, 7), (11, 3, 8)])
    try:
        # a: (id, k, v) = (1,1,10) (2,NULL,20) (3,3,30) (4,4,40) (5,1,50)
        # row_number per k by id; min of v over the previous and this row per k; lag(v, 1, 0) by id;
        # rank by k ASC NULLS LAST
        assert run(con, "window functions") == [
            (1, 1, 10, 1, 10, 0, 1), (2, None, 20, 1, 20, 10, 5), (3, 3, 30, 1, 30, 20, 3), (4, 4, 40, 1, 40, 30, 4),
            (5, 1, 50, 2, 10, 40, 1)]
        assert run(con, "union all") == [(1, 1), (2, None), (10, 1), (11, 3)]
        # SUM(v) per k, then the total (k NULL, level 1)
        assert run(con, "rollup (expand), grouping sets") == [
            (None, 0, 20), (1, 0, 60), (3, 0, 30), (4, 0, 40), (None, 1, 150)]
        # a x a where id > 1 on k: (1,5) (3,3) (4,4) (5,5) ordered by (c1, c5): skip one, take two
        assert run(con, "a self join, top-N with an offset") == [(3, 3, 3, 3), (4, 4, 4, 4)]
    finally:
        con.close()


def test_a_windowed_sum_is_cast_to_sparks_type_over_its_window():
    """SUM over a window frame, in Spark's result type: `CAST(SUM(v) OVER (...) AS BIGINT)`. (The cast
    must wrap the window: `CAST(SUM(v) AS BIGINT) OVER (...)` is no SQL any target parses.)"""
    con = connect([])
    try:
        # sum of v over the previous and this row per k (by id); count(*) of the rows up to this id
        assert run(con, "a windowed SUM over a frame") == [
            (1, 1, 10, 10, 1), (2, None, 20, 20, 2), (3, 3, 30, 30, 3), (4, 4, 40, 40, 4), (5, 1, 50, 60, 5)]
    finally:
        con.close()


@pytest.mark.parametrize("raw", [
    tree({"node": "sort", "child": {"node": "sort", "child": A, "keys": []}, "keys": []}),  # nested sort
    tree(join("outer", A, B)),
    tree(join("left", A, B)),  # an outer join without a condition
    tree(node(5, "c1")),
    tree(project(A, c2=c("c1"))),  # c2 defined twice
    tree({"node": "aggregate", "child": A, "group_by": [], "exprs": named(c9={"agg": "avg", "args": [c("c1")]})}),
    tree({"node": "limit", "child": A, "limit": -1}),
    tree(project(A, c9=op("/", c("c1"), c("c2"), type="double"))),  # a division of no decimals
    tree(project(A, c9=op("/", c("c1", "decimal(4,2)"), c("c2", "decimal(4,0)"), type="decimal(8,1)"))),  # scale below
    tree({"node": "aggregate", "child": A, "group_by": [], "exprs": []}),  # an aggregate of no output
    tree(join("inner", A, {"node": "scan", "scan": 1, "output": ["c1", "c4"]}, op("=", c("c2"), c("c4")))),
    tree(project(A, c9={"win": "rank", "args": [], "type": "int"})),  # a window function outside a window
    {"ir": 2, "scans": [], "root": A},
    {"tree": {"leaves": [scan("s.a", ["id", "k"])], "root": A}},  # the old form
])
def test_malformed_plans_are_plan_errors(raw):
    with pytest.raises(PlanError):
        sql(raw, "duckdb")


# --- AVG of decimals: the rendered division against Spark's own steps ------------------------------


def avg_sql(p: int, s: int) -> str:
    raw = tree({"node": "aggregate", "group_by": [], "exprs": named(c5=avg_of(c("c4", f"decimal({p},{s})"), p, s)),
                "child": node(0, "c4")}, [scan("s.d", ["v"])])
    return sql(raw, "duckdb")


def avg_in_duckdb(values: list[Decimal | None], p: int, s: int):
    con = engine.cursor()
    try:
        con.execute("CREATE SCHEMA IF NOT EXISTS s")
        con.execute(f"CREATE OR REPLACE TABLE s.d (k BIGINT, v DECIMAL({p}, {s}))")
        if values:
            con.executemany("INSERT INTO s.d VALUES (?, ?)", [(0, None if v is None else format(v, "f")) for v in values])
        return con.sql(avg_sql(p, s)).fetchall()[0][0]
    finally:
        con.close()


@settings(max_examples=150, deadline=None)
@given(data=st.data(), shape=st.sampled_from([(15, 2), (12, 0), (20, 5), (34, 10), (34, 0), (18, 18)]))
def test_avg_of_decimals_is_sparks_to_the_last_digit(data, shape):
    """Random decimals (extremes and ties among them) and NULLs: DuckDB's answer to the rendered
    AVG is the value and scale Spark's own steps give, NULL for no rows."""
    p, s = shape
    values = data.draw(st.lists(st.one_of(st.none(), unscaled_decimals(p, s)), max_size=12))
    expected = spark_avg(values, p, s)
    got = avg_in_duckdb(values, p, s)
    assert got == expected and (got is None or got.as_tuple().exponent == -(s + 4)), (values, got, expected)


@pytest.mark.parametrize("values, expected", [
    (["0.01", "0.00", "0.00"], "0.003333"),  # 0.00333333...: down
    (["0.02", "0.00", "0.00"], "0.006667"),  # 0.00666666...: up
    (["0.01"] + ["0.00"] * 7, "0.001250"),  # exact at the result's scale
    (["0.01"] + ["0.00"] * 15, "0.000625"),
    (["0.01"] + ["0.00"] * 31, "0.000313"),  # 0.0003125: a tie, away from zero
    (["-0.01"] + ["0.00"] * 31, "-0.000313"),  # ... on both sides
    (["-0.01"] + ["0.00"] * 63, "-0.000156"),  # -0.00015625: below the tie
    (["9999999999999.99"] * 3, "9999999999999.990000"),  # the largest decimal(15,2), no overflow
    ([None, None], None),  # no rows: NULL, not a division by zero
])
def test_avg_of_decimals_rounds_half_up_at_the_result_scale(values, expected):
    decimals = [None if v is None else Decimal(v) for v in values]
    got = avg_in_duckdb(decimals, 15, 2)
    assert got == (None if expected is None else Decimal(expected)) == spark_avg(decimals, 15, 2)
    assert "/" not in avg_sql(15, 2).replace("//", "")  # DuckDB's decimal `/` goes through DOUBLE


GROUPED = {"node": "aggregate", "group_by": [c("c3")], "child": B, "exprs": named(c3=c("c3"), c6=agg("sum", c("c4")))}
D = node(2, "c7", "c8")  # d.k, d.v


def grouped_join(left: dict, extra: dict | None = None) -> dict:
    """`left` inner joined on c2 with b's sums per key (a decorrelated correlated subquery's shape,
    TPC-H Q17), maybe with a second, non-equality conjunct."""
    on = op("=", c("c2"), c("c3"))
    scans = [*SCANS, scan("s.d", ["k", "v"])] if extra else SCANS
    return tree(join("inner", left, {"node": "filter", "child": GROUPED, "cond": op("IS_NOT_NULL", c("c6"))},
                     op("AND", on, extra) if extra else on), scans)


TREE_CASES["aggregate joined on its grouping column: its input reduced by EXISTS"] = grouped_join(A)
TREE_CASES["aggregate joined on its grouping column below another join: EXISTS over one side"] = grouped_join(
    join("inner", A, D, op("=", c("c2"), c("c7"))), op("<", c("c1"), c("c6")))


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.tuples(st.integers(0, 9), st.none() | st.integers(0, 4)), max_size=8),
       b=st.lists(st.tuples(st.none() | st.integers(0, 4), st.integers(-5, 5)), max_size=12),
       d=st.lists(st.none() | st.integers(0, 4), max_size=4))
def test_aggregate_joined_on_its_grouping_column_keeps_exactly_the_joined_groups(a, b, d):
    """The EXISTS that reduces the aggregate's input (render.reduce_grouped_joins) drops only groups
    the join drops: the result equals a model of the unreduced query, NULL keys on either side."""
    con = engine.cursor()
    try:
        con.execute("CREATE SCHEMA IF NOT EXISTS s")
        con.execute("CREATE OR REPLACE TABLE s.a (id BIGINT, k BIGINT, v BIGINT)")
        con.execute("CREATE OR REPLACE TABLE s.b (id BIGINT, k BIGINT, w BIGINT)")
        con.execute("CREATE OR REPLACE TABLE s.d (k BIGINT, v BIGINT)")
        for rows, insert in ((a, "INSERT INTO s.a VALUES (?, ?, 0)"), (b, "INSERT INTO s.b VALUES (0, ?, ?)"),
                             ([(k,) for k in d], "INSERT INTO s.d VALUES (?, 0)")):
            if rows:
                con.executemany(insert, rows)
        sums: dict = {}
        for k, w in b:
            sums[k] = sums.get(k, 0) + w
        groups = [(k, s) for k, s in sums.items() if k is not None]
        simple = [(i, k, g, s) for i, k in a for g, s in groups if k == g]
        assert sorted(run(con, "aggregate joined on its grouping column: its input reduced by EXISTS")) == sorted(simple)
        deeper = [(i, k, dk, 0, g, s) for i, k in a for dk in d if k is not None and k == dk
                  for g, s in groups if k == g and i < s]
        assert sorted(run(con, "aggregate joined on its grouping column below another join: EXISTS over one side")) == sorted(deeper)
    finally:
        con.close()


def test_the_reduction_exists_reads_the_smallest_side_only():
    text = sql(TREE_CASES["aggregate joined on its grouping column below another join: EXISTS over one side"], "duckdb")
    exists = text[text.index("EXISTS"):]
    assert '"s"."b"' in text and '"s"."d"' not in exists.split("GROUP BY")[0], text


def test_reduce_grouped_joins_leaves_other_joins_alone():
    p = PushedPlan.from_dict(TREE_CASES["aggregate joined on its grouping column: its input reduced by EXISTS"])
    reduced = render.reduce_grouped_joins(p.root)
    aggregate = next(n for n in reduced.walk() if n.op == "aggregate")
    assert aggregate.children[0].op == "join" and aggregate.children[0].join_type == "semi"
    plain = PushedPlan.from_dict(TREE_CASES["left join, top-N"]).root
    assert render.reduce_grouped_joins(plain) == plain


def test_conjuncts_flattens_nested_ands():
    p = PushedPlan.from_dict(tree(project(A, c9=op("AND", op("AND", op(">", c("c1"), lit(1)), op("<", c("c1"), lit(5))),
                                                   op("IS_NOT_NULL", c("c2")))), [SCANS[0]]))
    parts = render.conjuncts(p.root.exprs[0][1])
    assert [x.name for x in parts] == [">", "<", "IS_NOT_NULL"]
