"""rewrite/render.py, joined scans: golden SQL for DuckDB, Postgres and MySQL, and the DuckDB SQL
run over in-memory Arrow tables against hand-written expectations (NULL keys, outer joins,
duplicate column names, complete aggregates, top-N)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from sqlglot import exp
from unit_support import check_golden, lit_json

from htap import engine
from htap.rewrite import render
from htap.rewrite.subplan import PushedSubplan, SubplanError

COLUMNS = {"a": ["id", "name", "k"], "b": ["id", "name", "a_id", "v"], "c": ["b_id", "w"]}


def col(name: str, table: int, type: str = "int") -> dict:
    return {"col": name, "table": table, "type": type}


def eq(left: dict, right: dict, op: str = "=") -> dict:
    return {"op": op, "type": "boolean", "args": [left, right]}


def table(name: str, columns: list[str], filters: list | None = None) -> dict:
    return {"table": f"s.{name}", "pushed": {"filters": filters or [], "columns": columns}}


def join(*tables: dict, steps: list[dict], split: int | None = None) -> dict:
    out = {"tables": list(tables), "steps": steps}
    if split is not None:
        out["split"] = split
    return out


A_B = join(table("a", ["id", "name"]), table("b", ["id", "name", "a_id"]),
           steps=[{"type": "inner", "on": eq(col("id", 0), col("a_id", 1))}])
CASES: dict[str, dict] = {
    "inner join, duplicate names": {"join": A_B, "select": [col("id", 0), col("name", 0, "string"), col("id", 1), col("name", 1, "string")]},
    "left join with a filter on the right table": {
        "join": join(table("a", ["id", "k"]), table("b", ["a_id", "v"], [{"op": "gt", "col": "v", "value": lit_json("long", 10)}]),
                     steps=[{"type": "left", "on": eq(col("id", 0), col("a_id", 1))}]),
        "select": [col("id", 0), col("v", 1)],
    },
    "right join": {
        "join": join(table("a", ["id"]), table("b", ["id", "a_id"]), steps=[{"type": "right", "on": eq(col("id", 0), col("a_id", 1))}]),
        "select": [col("id", 0), col("id", 1)],
    },
    "null-safe join": {
        "join": join(table("a", ["id", "k"]), table("b", ["id", "a_id"]), steps=[{"type": "inner", "on": eq(col("k", 0), col("a_id", 1), "<=>")}]),
        "select": [col("id", 0), col("id", 1)],
    },
    "three tables, complete aggregate, top-N": {
        "join": join(table("a", ["id", "k"]), table("b", ["id", "a_id", "v"]), table("c", ["b_id", "w"]),
                     steps=[{"type": "inner", "on": eq(col("id", 0), col("a_id", 1))},
                            {"type": "inner", "on": eq(col("b_id", 2), col("id", 1))}]),
        "group_by": [col("k", 0)],
        "aggregates": [{"fn": "sum", "arg": {"op": "*", "type": "bigint", "args": [
            {"op": "cast", "type": "bigint", "args": [col("v", 1)]}, {"op": "cast", "type": "bigint", "args": [col("w", 2)]}]}},
            {"fn": "count_star"}, {"fn": "count_distinct", "arg": col("id", 1)}],
        "complete": True,
        "order": [{"output": 1, "asc": False, "nulls_first": False}, {"output": 0, "asc": True, "nulls_first": True}],
        "limit": 2,
    },
    "top-N of joined rows, split by a table": {
        "join": {**A_B, "split": 1},
        "select": [col("id", 1), col("name", 0, "string")],
        "order": [{"expr": col("name", 0, "string"), "asc": True, "nulls_first": False}, {"expr": col("id", 1), "asc": False, "nulls_first": True}],
        "limit": 3,
    },
}


def relations(subplan: PushedSubplan) -> list[exp.Expression]:
    out = []
    for i, t in enumerate(subplan.join.tables):
        name = t.name.split(".")[1]
        source = exp.Table(this=exp.to_identifier(name, quoted=True), db=exp.to_identifier("s", quoted=True))
        out.append(render.table_relation(render.select(t.subplan, source, COLUMNS[name]), i))
    return out


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_golden_join_sql(dialect):
    actual = {}
    for case, raw in CASES.items():
        subplan = PushedSubplan.from_dict(raw)
        actual[case] = render.joined_select(subplan, relations(subplan)).sql(dialect)
    check_golden(f"join_{dialect}.sql", actual)


A = [(1, "x", 1), (2, "y", None), (3, None, 3), (4, "x", None)]
B = [(10, "p", 1, 5), (11, "q", 1, 20), (12, None, 3, 30), (13, "r", None, 40), (14, "s", 9, 50)]
C = [(10, 2), (11, 3), (11, 4), (12, 1), (13, 7)]


@pytest.fixture(scope="module")
def con():
    c = engine.cursor()
    c.execute("CREATE SCHEMA IF NOT EXISTS s")
    for name, rows, types in (("a", A, ["BIGINT", "TEXT", "BIGINT"]), ("b", B, ["BIGINT", "TEXT", "BIGINT", "BIGINT"]),
                              ("c", C, ["BIGINT", "BIGINT"])):
        cols = ", ".join(f"{n} {t}" for n, t in zip(COLUMNS[name], types))
        c.execute(f"CREATE OR REPLACE TABLE s.{name} ({cols})")
        c.executemany(f"INSERT INTO s.{name} VALUES ({', '.join('?' for _ in types)})", rows)
    yield c
    c.close()


def run(con, case: str) -> list[tuple]:
    subplan = PushedSubplan.from_dict(CASES[case])
    return con.sql(render.joined_select(subplan, relations(subplan)).sql("duckdb")).fetchall()


def test_inner_join_drops_null_keys_and_keeps_both_columns_of_a_name(con):
    assert sorted(run(con, "inner join, duplicate names")) == [(1, "x", 10, "p"), (1, "x", 11, "q"), (3, None, 12, None)]


def test_left_join_keeps_unmatched_left_rows_and_filters_the_right_table_first(con):
    assert sorted(run(con, "left join with a filter on the right table"), key=repr) == sorted(
        [(1, 20), (2, None), (3, 30), (4, None)], key=repr)


def test_right_join_keeps_unmatched_right_rows(con):
    assert sorted(run(con, "right join"), key=repr) == sorted([(1, 10), (1, 11), (3, 12), (None, 13), (None, 14)], key=repr)


def test_null_safe_join_matches_null_keys(con):
    assert sorted(run(con, "null-safe join"), key=repr) == sorted([(1, 10), (1, 11), (3, 12), (2, 13), (4, 13)], key=repr)


def test_complete_aggregate_with_count_distinct_and_top_n(con):
    # k=1: b 10 (c 2) and 11 (c 3, 4): sums 5*2 + 20*3 + 20*4 = 150, 3 rows, 2 distinct b; k=3: b 12 x c 1.
    assert run(con, "three tables, complete aggregate, top-N") == [(1, 150, 3, 2), (3, 30, 1, 1)]


def test_top_n_orders_nulls_as_spark_asked(con):
    assert run(con, "top-N of joined rows, split by a table") == [(11, "x"), (10, "x"), (12, None)]


def test_malformed_joins_are_subplan_errors():
    one = {"join": join(table("a", ["id"]), table("b", ["id"]), steps=[]), "select": [col("id", 0)]}
    with pytest.raises(SubplanError):
        PushedSubplan.from_dict(one)
    bad_split = {"join": {**A_B, "split": 5}, "select": [col("id", 0)]}
    with pytest.raises(SubplanError):
        PushedSubplan.from_dict(bad_split)
    with pytest.raises(SubplanError):
        render.select(PushedSubplan.from_dict(CASES["right join"]), exp.to_table("t"), ["id"])
