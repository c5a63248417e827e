"""rewrite/tree.py, pushed trees (whole-subtree pushdown): golden SQL for DuckDB, Postgres and
MySQL, and the DuckDB SQL run over in-memory tables against hand-written expectations — semi and
anti joins (NOT IN's null-aware condition with NULL keys on either side), aggregates between
joins, scalar subqueries, top-N — and malformed trees rejected."""

from __future__ import annotations

import pytest
from sqlglot import exp
from unit_support import check_golden

from htap import engine
from htap.rewrite.subplan import PushedSubplan, SubplanError
from htap.rewrite.tree import render_tree_over

COLUMNS = {"a": ["id", "k", "v"], "b": ["id", "k", "w"]}


def c(name: str, type: str = "bigint") -> dict:
    return {"col": name, "type": type}


def op(name: str, *args: dict, type: str = "boolean") -> dict:
    return {"op": name, "type": type, "args": list(args)}


def leaf(table: str, columns: list[str], filters: list | None = None) -> dict:
    return {"table": f"s.{table}", "pushed": {"filters": filters or [], "columns": columns}}


def scan(k: int, *names: str) -> dict:
    return {"node": "scan", "leaf": k, "output": list(names)}


A = scan(0, "c1", "c2")  # a.id, a.k
B = scan(1, "c3", "c4")  # b.k, b.w
NOT_IN = op("OR", op("=", c("c2"), c("c3")), op("IS_NULL", op("=", c("c2"), c("c3"))))
LEAVES = [leaf("a", ["id", "k"]), leaf("b", ["k", "w"])]


def tree(root: dict, leaves: list | None = None) -> dict:
    return {"tree": {"leaves": leaves or LEAVES, "root": root}}


def top(child: dict) -> dict:
    return {"node": "sort", "child": child, "keys": [{"expr": c("c1"), "asc": True, "nulls_first": True}]}


CASES: dict[str, dict] = {
    "semi join (IN)": tree(top({"node": "join", "type": "semi", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))})),
    "null-aware anti join (NOT IN)": tree(top({"node": "join", "type": "anti", "left": A, "right": B, "on": NOT_IN})),
    "anti join (NOT EXISTS)": tree(top({"node": "join", "type": "anti", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))})),
    "NOT IN over a filtered side": tree(top({"node": "join", "type": "anti", "left": A, "on": NOT_IN, "right": {
        "node": "filter", "child": B, "cond": op("IS_NOT_NULL", c("c3"))}})),
    "aggregate between joins, scalar subquery": tree(top({
        "node": "filter",
        "cond": op(">", c("c6"), {"subquery": {"node": "aggregate", "group_by": [], "child": scan(2, "c7"), "exprs": [
            {"name": "c8", "expr": {"agg": "min", "args": [c("c7")], "type": "bigint"}}]}, "type": "bigint"}),
        "child": {"node": "aggregate", "group_by": [c("c1")], "exprs": [
            {"name": "c1", "expr": c("c1")},
            {"name": "c5", "expr": {"agg": "count_star", "args": [], "type": "bigint"}},
            {"name": "c6", "expr": {"agg": "sum", "args": [c("c4")], "type": "bigint"}}],
            "child": {"node": "join", "type": "inner", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))}}}),
        [*LEAVES, leaf("b", ["w"])]),
    "count(*) over a join: a node with no column": tree({"node": "aggregate", "group_by": [], "exprs": [
        {"name": "c9", "expr": {"agg": "count_star", "args": [], "type": "bigint"}}], "child": {
        "node": "project", "exprs": [], "child": {"node": "join", "type": "inner", "left": A, "right": B,
                                                  "on": op("=", c("c2"), c("c3"))}}}),
    "left join, top-N": tree({"node": "limit", "limit": 3, "child": {
        "node": "join", "type": "left", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))},
        "keys": [{"expr": c("c4"), "asc": False, "nulls_first": False}, {"expr": c("c1"), "asc": True, "nulls_first": True}]}),
}


def relations(subplan: PushedSubplan) -> list[exp.Expression]:
    return [exp.Table(this=exp.to_identifier(name.split(".")[1], quoted=True), db=exp.to_identifier("s", quoted=True))
            for name, _own in subplan.table_reads()]


def columns(subplan: PushedSubplan) -> list[list[str]]:
    return [COLUMNS[name.split(".")[1]] for name, _own in subplan.table_reads()]


def sql(case: str, dialect: str) -> str:
    subplan = PushedSubplan.from_dict(CASES[case])
    return render_tree_over(subplan, relations(subplan), columns(subplan)).sql(dialect)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_golden_tree_sql(dialect):
    check_golden(f"tree_{dialect}.sql", {case: sql(case, dialect) for case in CASES})


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
    return con.sql(sql(case, "duckdb")).fetchall()


def test_in_and_not_in_follow_sql_null_semantics():
    with_null = connect([(10, 1, 7), (11, 3, 8), (12, None, 9)])
    try:
        assert run(with_null, "semi join (IN)") == [(1, 1), (3, 3), (5, 1)]
        # NOT IN over a set holding NULL: no row; NOT EXISTS: the unmatched rows, NULL key included.
        assert run(with_null, "null-aware anti join (NOT IN)") == []
        assert run(with_null, "anti join (NOT EXISTS)") == [(2, None), (4, 4)]
        # The NULL filtered out of the set: a's NULL key still is not NOT IN (unknown).
        assert run(with_null, "NOT IN over a filtered side") == [(4, 4)]
    finally:
        with_null.close()
    empty = connect([])
    try:  # NOT IN over an empty set holds for every row, NULL keys included
        assert run(empty, "null-aware anti join (NOT IN)") == [(1, 1), (2, None), (3, 3), (4, 4), (5, 1)]
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
    finally:
        con.close()


@pytest.mark.parametrize("raw", [
    tree({"node": "sort", "child": {"node": "sort", "child": A, "keys": []}, "keys": []}),  # nested sort
    tree({"node": "join", "type": "outer", "left": A, "right": B}),
    tree(scan(5, "c1")),
    tree({"node": "project", "child": A, "exprs": [{"name": "c2", "expr": c("c1")}]}),  # c2 defined twice
    tree({"node": "aggregate", "child": A, "group_by": [], "exprs": [{"name": "c9", "expr": {"agg": "avg", "args": [c("c1")]}}]}),
    tree({"node": "limit", "child": A, "limit": -1}),
    {"tree": {"leaves": [], "root": A}},
])
def test_malformed_trees_are_subplan_errors(raw):
    with pytest.raises(SubplanError):
        PushedSubplan.from_dict(raw)

