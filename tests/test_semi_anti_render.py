"""Semi, anti and existence joins of a pushed plan (htap.rewrite.render), rendered flat — an EXISTS
/ NOT EXISTS in one SELECT with the inner joins around it — run by DuckDB (the replica), Postgres
and MariaDB (a failed-over plan), against a row-by-row model of Spark's semantics: EXISTS, NOT
EXISTS, the null-aware anti join of NOT IN, and the existence join of EXISTS / IN under OR or NOT
(a boolean column filtered above), with NULL join keys on both sides and empty sides, each below
an inner join (where Spark's optimizer pushes it, TPC-H Q21), above it, below a filter and a
projection, over a filtered or joined right side, and nested. The shapes below and above an
inner join must agree: the flat SELECT is what lets the target order the joins itself.
The end-to-end check against Spark's own answer is tests/test_spark_subtree_pushdown.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from htap import engine
from htap.rewrite import dialects, render
from htap.rewrite.pushed import PushedPlan

TABLES = {"a": ("id", "k", "v"), "b": ("id", "k", "w"), "c": ("id", "k")}
PREFIX = "htap_semi_"


def c(name: str) -> dict:
    return {"col": name, "type": "int"}


def op(name: str, *args: dict) -> dict:
    return {"op": name, "type": "boolean", "args": list(args)}


def lit(value: int) -> dict:
    return {"lit": {"type": "long", "value": value}, "type": "int"}


A = {"node": "scan", "scan": 0, "output": ["a_id", "a_k", "a_v"]}
B = {"node": "scan", "scan": 1, "output": ["b_id", "b_k", "b_w"]}
C = {"node": "scan", "scan": 2, "output": ["c_id", "c_k"]}
EQ = op("=", c("a_k"), c("b_k"))
CONDITIONS = {
    "k = k": EQ,
    "NOT IN (null-aware)": op("OR", EQ, op("IS_NULL", EQ)),
    "k = k AND w <> v": op("AND", EQ, op("<>", c("b_w"), c("a_v"))),
}


def join(kind: str, left: dict, right: dict, on: dict) -> dict:
    if kind == "existence":  # EXISTS under OR: a's rows where a match exists or a.v > 1
        exists = {"node": "join", "type": kind, "left": left, "right": right, "on": on, "exists": "ex"}
        keep = op("OR", {"col": "ex", "type": "boolean"}, op(">", c("a_v"), lit(1)))
        names = [n for n in ("a_id", "a_k", "a_v") if n in left_columns(left)]
        return {"node": "project", "exprs": [{"name": n, "expr": c(n)} for n in names],
                "child": {"node": "filter", "cond": keep, "child": exists}}
    return {"node": "join", "type": kind, "left": left, "right": right, "on": on}


def left_columns(node: dict) -> list[str]:
    if node["node"] == "scan":
        return node["output"]
    if node["node"] == "join":
        return left_columns(node["left"]) + ([] if node["type"] in ("semi", "anti") else left_columns(node["right"]))
    return [e["name"] for e in node["exprs"]] if "exprs" in node else left_columns(node["child"])


def shapes(kind: str, on: dict) -> dict[str, dict]:
    """Plan roots with the semi/anti/existence join `kind` on `on` (a.k against b.k) in several places."""
    with_c = op("=", c("a_id"), c("c_id"))
    return {
        "alone": join(kind, A, B, on),
        "below an inner join": join("inner", join(kind, A, B, on), C, with_c),
        "above an inner join": join(kind, join("inner", A, C, with_c), B, on),
        "below a filter and a projection, then joined": join("inner", {
            "node": "project", "exprs": [{"name": n, "expr": c(n)} for n in ("a_id", "a_k", "a_v")], "child": {
                "node": "filter", "cond": op("IS_NOT_NULL", c("a_v")), "child": join(kind, A, B, on)}}, C, with_c),
        "over a filtered right side": join(kind, A, {"node": "filter", "cond": op(">", c("b_w"), lit(0)), "child": B}, on),
        "over a joined right side": join(kind, A, join("inner", B, C, op("=", c("b_id"), c("c_id"))), on),
        "nested under NOT IN of c": join("anti", join(kind, A, B, on), C,
                                         op("OR", op("=", c("a_v"), c("c_k")), op("IS_NULL", op("=", c("a_v"), c("c_k"))))),
    }


def plan(root: dict) -> tuple[PushedPlan, list[str]]:
    """The plan of `root` (its scans renumbered in the order they are used) and their tables."""
    tables: list[str] = []

    def renumber(node):
        if isinstance(node, dict):
            if node.get("node") == "scan":
                table = list(TABLES)[node["scan"]]
                if table not in tables:
                    tables.append(table)
                return {**node, "scan": tables.index(table)}
            return {k: renumber(v) for k, v in node.items()}
        return [renumber(v) for v in node] if isinstance(node, list) else node

    renumbered = renumber(root)
    scans = [{"table": f"s.{t}", "columns": list(TABLES[t])} for t in tables]
    return PushedPlan.from_dict({"ir": 2, "scans": scans, "root": renumbered}), tables


def sql(root: dict, dialect: str) -> str:
    pushed, tables = plan(root)
    query = render.render_plan(pushed, [exp.to_table(PREFIX + t) for t in tables])
    return (query if dialect == "duckdb" else dialects.for_source(query, dialect)).sql(dialect)


# --- the model: Spark's semantics, one row at a time, three-valued ---------------------------------

def value(e: dict, row: dict):
    if "col" in e:
        return row[e["col"]]
    if "lit" in e:
        return e["lit"]["value"]
    args = [value(a, row) for a in e["args"]]
    name = e["op"]
    if name == "IS_NULL":
        return args[0] is None
    if name == "IS_NOT_NULL":
        return args[0] is not None
    if name == "AND":
        return False if False in args else (None if None in args else True)
    if name == "OR":
        return True if True in args else (None if None in args else False)
    if None in args:
        return None
    x, y = args
    return {"=": x == y, "<>": x != y, ">": x > y}[name]


def model(node: dict, data: dict[str, list[tuple]]) -> list[dict]:
    kind = node["node"]
    if kind == "scan":
        table = list(TABLES)[node["scan"]]
        return [dict(zip(node["output"], r)) for r in data[table]]
    if kind == "filter":
        return [r for r in model(node["child"], data) if value(node["cond"], r) is True]
    if kind == "project":
        return [{e["name"]: value(e["expr"], r) for e in node["exprs"]} for r in model(node["child"], data)]
    left, right = model(node["left"], data), model(node["right"], data)
    if node["type"] == "inner":
        return [{**x, **y} for x in left for y in right if value(node["on"], {**x, **y}) is True]
    matched = [any(value(node["on"], {**x, **y}) is True for y in right) for x in left]
    if node["type"] == "existence":
        return [{**x, node["exists"]: m} for x, m in zip(left, matched)]
    return [x for x, m in zip(left, matched) if m == (node["type"] == "semi")]


def expected(root: dict, data) -> list[tuple]:
    return sorted((tuple(r.values()) for r in model(root, data)), key=repr)


# --- the engines -----------------------------------------------------------------------------------

def load(conn, data, int_type: str) -> None:
    with conn.cursor() as cur:
        for t, cols in TABLES.items():
            cur.execute(f"DROP TABLE IF EXISTS {PREFIX}{t}")
            cur.execute(f"CREATE TABLE {PREFIX}{t} ({', '.join(f'{n} {int_type}' for n in cols)})")
            if data[t]:
                cur.executemany(f"INSERT INTO {PREFIX}{t} VALUES ({', '.join(['%s'] * len(cols))})", data[t])


def answer(conn, text: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(text)
        return sorted((tuple(r) for r in cur.fetchall()), key=repr)


keys = st.one_of(st.none(), st.integers(0, 3))
DATA = st.fixed_dictionaries({
    t: st.lists(st.tuples(*([st.integers(0, 4)] + [keys] * (len(cols) - 1))), max_size=6) for t, cols in TABLES.items()})
CASES = [(kind, cond, shape) for kind in ("semi", "anti", "existence") for cond in CONDITIONS for shape in shapes(kind, EQ)]
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_all(run, data) -> None:
    for kind, cond, shape in CASES:
        root = shapes(kind, CONDITIONS[cond])[shape]
        assert run(root) == expected(root, data), (kind, cond, shape, data)


@PROPERTY
@given(data=DATA)
def test_duckdb_answers_as_spark(data):
    con = engine.cursor()
    try:
        for t, cols in TABLES.items():
            con.execute(f"CREATE OR REPLACE TABLE {PREFIX}{t} ({', '.join(f'{n} INTEGER' for n in cols)})")
            if data[t]:
                con.executemany(f"INSERT INTO {PREFIX}{t} VALUES ({', '.join(['?'] * len(cols))})", data[t])
        check_all(lambda root: sorted((tuple(r) for r in con.sql(sql(root, "duckdb")).fetchall()), key=repr), data)
    finally:
        con.close()


@PROPERTY
@given(data=DATA)
def test_postgres_answers_as_spark(pg, data):
    load(pg, data, "int")
    check_all(lambda root: answer(pg, sql(root, "postgres")), data)


@PROPERTY
@given(data=DATA)
def test_mariadb_answers_as_spark(mysql, data):
    load(mysql, data, "int")
    check_all(lambda root: answer(mysql, sql(root, "mysql")), data)


@pytest.mark.parametrize("kind", ["semi", "anti"])
def test_below_an_inner_join_is_one_flat_select(kind):
    """The semi/anti join below an inner join renders with the join in the same SELECT as its
    EXISTS (no derived table between them for the target's optimizer to stop at)."""
    text = sql(shapes(kind, EQ)["below an inner join"], "duckdb")
    outer = text[:text.index("EXISTS")]
    assert "JOIN" in outer and outer.count("SELECT") == 3, text  # the SELECT and its two leaves
