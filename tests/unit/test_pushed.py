"""rewrite/pushed.py: the pushed plan's JSON (the IR the shim sends), parsed and checked at the
boundary; plans built in Python (table_plan, count_plan) and their JSON form."""

from __future__ import annotations

import json

import pytest
from unit_support import agg, cmp, col, in_, is_not_null, is_null, lit_json, not_, one_scan, op, or_, scan_node, value

from htap.errors import HtapError
from htap.rewrite.pushed import (
    AGGREGATES,
    IR_VERSION,
    JOIN_TYPES,
    LITERAL_TYPES,
    NODES,
    OPS,
    WINDOW_FUNCTIONS,
    Expr,
    Frame,
    Literal,
    Node,
    PlanError,
    PushedPlan,
    Scan,
    SortKey,
    count_plan,
    decimal_type,
    expr_dict,
    table_plan,
    to_dict,
    to_json,
)


def c(name: str, type_: str = "bigint") -> dict:
    return {"col": name, "type": type_}


def lit(type_: str, v=None, t: str = "bigint") -> dict:
    return {"lit": lit_json(type_, v), "type": t}


def call(name: str, *args: dict, type_: str = "boolean") -> dict:
    return {"op": name, "type": type_, "args": list(args)}


def scan(table: str = "s.a", columns=("id", "k"), filter=()) -> dict:
    return {"table": table, "columns": list(columns), "filter": list(filter)}


def node(k: int, *names: str) -> dict:
    return {"node": "scan", "scan": k, "output": list(names)}


A = node(0, "c1", "c2")  # s.a: id, k
B = node(1, "c3", "c4")  # s.b: k, w
SCANS = [scan("s.a", ["id", "k"]), scan("s.b", ["k", "w"])]


def plan(root: dict, scans: list | None = None, **extra) -> dict:
    return {"ir": IR_VERSION, "scans": scans if scans is not None else [SCANS[0]], "root": root, **extra}


def join(kind: str, left=A, right=B, on: dict | None = None, **extra) -> dict:
    out = {"node": "join", "type": kind, "left": left, "right": right, **extra}
    if on is not None:
        out["on"] = on
    return out


def where(*conjuncts: dict) -> PushedPlan:
    """A plan reading s.a's `id` with `conjuncts` as its scan's filter."""
    return PushedPlan.from_dict(plan(node(0, "c1"), [scan("s.a", ["id"], conjuncts)]))


# --- the boundary -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, ""])
def test_no_plan_text_is_an_error_the_shim_always_sends_one(text):
    with pytest.raises(PlanError, match="no pushed plan"):
        PushedPlan.from_json(text)


def test_invalid_json_is_a_plan_error():
    with pytest.raises(PlanError, match="not valid JSON"):
        PushedPlan.from_json("{scans: [}")


def test_plan_errors_are_htap_errors():
    assert issubclass(PlanError, HtapError)


@pytest.mark.parametrize("raw", [[], "x", None])
def test_a_plan_is_an_object(raw):
    with pytest.raises(PlanError, match="object"):
        PushedPlan.from_dict(raw)


@pytest.mark.parametrize("version", [None, 1, 3, "2"])
def test_another_version_of_the_ir_names_the_mismatch(version):
    raw = plan(node(0, "c1", "c2"))
    raw["ir"] = version
    if version is None:
        del raw["ir"]
    with pytest.raises(PlanError, match="catalog shim and the Python package"):
        PushedPlan.from_dict(raw)


def test_the_old_subplan_forms_are_refused():
    # Version 1's scan subplans (filters/where/aggregates/join/tree) carry no version: refused, named.
    for old in ({}, {"columns": ["a"], "filters": []}, {"tree": {"leaves": [], "root": {}}}):
        with pytest.raises(PlanError, match="version"):
            PushedPlan.from_dict(old)


def test_unknown_top_level_keys_are_named():
    with pytest.raises(PlanError, match=r"unknown keys \['having', 'order'\]"):
        PushedPlan.from_dict(plan(node(0, "c1", "c2"), having=[], order=[]))


# --- scans ----------------------------------------------------------------------------------------


def test_a_scan_keeps_its_columns_in_order_and_may_read_none():
    p = PushedPlan.from_dict(plan(node(0, "x", "y"), [scan("s.a", ["k", "id"])]))
    assert p.scans == (Scan("s.a", ("k", "id")),) and p.root == Node("scan", scan=0, output=("x", "y"))
    assert p.root.columns() == ["x", "y"]
    none = PushedPlan.from_dict(plan(node(0), [scan("s.a", [])]))
    assert none.scans[0].columns == () and none.root.columns() == [] and none.row_scan


def test_a_scans_filter_is_its_conjuncts_over_table_columns():
    p = where(call("=", c("id"), lit("long", 1)), call("IS_NOT_NULL", c("k")))
    assert p.scans[0].filter == (cmp("eq", "id", "long", 1), is_not_null("k", "bigint"))
    assert p.scans[0].referenced() == {"id", "k"}


@pytest.mark.parametrize("bad, match", [
    ({"table": "noschema", "columns": []}, "schema.name"),
    ({"columns": ["a"]}, "schema.name"),
    ({"table": "s.a", "columns": ["a", "a"]}, "column twice"),
    ({"table": "s.a", "columns": [""]}, "names"),
    ({"table": "s.a", "columns": "a"}, "is a list"),
    ({"table": "s.a", "columns": [], "pushed": {}}, "unknown keys"),
    ({"table": "s.a", "columns": [], "filter": {"op": "IS_NULL"}}, "is a list"),
    ({"table": "s.a", "columns": [], "filter": [c("a")]}, "boolean"),  # a conjunct is a predicate
    ({"table": "s.a", "columns": [], "filter": [
        call(">", c("a"), {"subquery": node(0, "x"), "type": "bigint"})]}, "no subquery"),
])
def test_malformed_scans_are_refused(bad, match):
    with pytest.raises(PlanError, match=match):
        PushedPlan.from_dict(plan(node(0), [bad]))


def test_a_plan_reads_at_least_one_table_and_every_scan_it_lists():
    with pytest.raises(PlanError, match="at least one table"):
        PushedPlan.from_dict(plan(A, []))
    with pytest.raises(PlanError, match=r"read scans \[0\], it lists 2"):
        PushedPlan.from_dict(plan(A, SCANS))  # s.b listed, never read
    with pytest.raises(PlanError, match="names one of the plan's 1 scans"):
        PushedPlan.from_dict(plan(node(1, "c3", "c4")))
    with pytest.raises(PlanError, match="names 1 outputs for 2 columns"):
        PushedPlan.from_dict(plan(node(0, "c1")))


@pytest.mark.parametrize("split, ok", [(0, True), (1, True), (2, False), (-1, False), (True, False), ("0", False)])
def test_split_names_one_of_the_scans(split, ok):
    raw = plan(join("inner", on=call("=", c("c2"), c("c4"))), SCANS, split=split)
    if ok:
        assert PushedPlan.from_dict(raw).split == split and not PushedPlan.from_dict(raw).one_task
    else:
        with pytest.raises(PlanError, match="split"):
            PushedPlan.from_dict(raw)


def test_without_split_the_plan_is_one_task():
    p = PushedPlan.from_dict(plan(A))
    assert p.split is None and p.one_task


# --- expressions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", LITERAL_TYPES)
def test_every_literal_type(type_):
    v = {"null": None, "boolean": True, "long": 7, "double": "NaN", "decimal": "1.50", "string": "s",
         "date": "2024-02-29", "timestamp": -1, "timestamp_ntz": "2024-02-29T01:02:03.5"}[type_]
    (f,) = where(call("=", c("id"), lit(type_, v))).scans[0].filter
    assert f.args[1] == Expr.literal(Literal(type_, v), "bigint")


def test_a_literal_without_value_is_null_valued():
    (f,) = where(call("=", c("id"), {"lit": {"type": "null"}, "type": "void"})).scans[0].filter
    assert f.args[1].value == Literal("null", None) and f.args[1].type == "void"


@pytest.mark.parametrize("literal", [{"type": "interval", "value": 1}, {"value": 1}, {"type": None}, "1"])
def test_unknown_literal_types_are_refused(literal):
    with pytest.raises(PlanError, match="unknown pushed literal"):
        where(call("=", c("id"), {"lit": literal, "type": "bigint"}))


def test_an_unknown_literal_inside_in_is_refused():
    with pytest.raises(PlanError, match="unknown pushed literal"):
        where(call("IN", c("id"), lit("long", 1), {"lit": {"type": "uuid", "value": "x"}, "type": "string"}))


@pytest.mark.parametrize("name", OPS)
def test_every_operation_parses(name):
    e = {"op": name, "type": "boolean", "args": [c("id"), lit("long", 1)]}
    if name == "extract":
        e["field"] = "YEAR"
    (f,) = where(e).scans[0].filter
    assert f == Expr("op", "boolean", name, args=(col("id", "bigint"), value("long", 1)), field=e.get("field"))


@pytest.mark.parametrize("raw", [
    {"op": "like", "type": "boolean", "args": []},  # names are case-sensitive: LIKE
    {"op": "xor", "type": "boolean", "args": []},
    {"op": "regexp", "type": "boolean", "args": [c("id")]},
    {"type": "boolean"},
    {"op": "NOT", "type": "boolean", "args": [{"op": "regexp", "type": "boolean", "args": []}]},  # nested
    {"col": 5, "type": "bigint"},
    {"col": "id", "type": 5},
    "id",
])
def test_unknown_expressions_are_refused(raw):
    with pytest.raises(PlanError):
        where(raw)


def test_in_is_null_not_and_or_nesting():
    in_raw = call("IN", c("id"), lit("long", 1), lit("null"))
    neg = call("NOT", call("OR", call("IS_NULL", c("k")), call("AND", call("IS_NOT_NULL", c("k")),
                                                                call("<", c("id"), lit("double", 1.5, "double")))))
    p = where(in_raw, neg)
    first, second = p.scans[0].filter
    assert first == in_("id", ("long", 1), ("null", None), spark="bigint")
    assert second == not_(or_(is_null("k", "bigint"), Expr.call("AND", "boolean", is_not_null("k", "bigint"), Expr.call(
        "<", "boolean", col("id", "bigint"), value("double", 1.5)))))
    assert second.columns() == {"id", "k"} and p.scans[0].referenced() == {"id", "k"}


def test_in_with_no_values_parses_as_a_one_argument_call():
    (f,) = where(call("IN", c("id"))).scans[0].filter
    assert f.name == "IN" and f.args == (col("id", "bigint"),)


@pytest.mark.parametrize("fn", AGGREGATES)
def test_every_aggregate(fn):
    args = [] if fn == "count_star" else [c("c2")]
    raw = plan({"node": "aggregate", "child": A, "group_by": [c("c1")], "exprs": [
        {"name": "c1", "expr": c("c1")}, {"name": "c9", "expr": {"agg": fn, "distinct": False, "args": args, "type": "bigint"}}]})
    p = PushedPlan.from_dict(raw)
    (_, e) = p.root.exprs[1]
    assert e == agg(fn, *([col("c2", "bigint")] if args else []))
    assert p.root.columns() == ["c1", "c9"] and p.root.group_by == (col("c1", "bigint"),) and not p.root.partial
    assert p.partial_aggregate() is None


@pytest.mark.parametrize("raw", [
    {"agg": "avg", "args": [c("c1")], "type": "double"},  # Spark's AVG arrives as a division
    {"agg": "sum_distinct", "args": [c("c1")]},
    {"agg": "count_star", "args": [c("c1")]},
    {"agg": "sum", "args": []},
    {"agg": "sum", "args": [c("c1"), c("c2")]},
])
def test_unknown_aggregates_are_refused(raw):
    with pytest.raises(PlanError, match="unknown pushed aggregate"):
        PushedPlan.from_dict(plan({"node": "aggregate", "child": A, "group_by": [], "exprs": [{"name": "c9", "expr": raw}]}))


def test_a_partial_aggregate_is_the_plans_partial_aggregate():
    raw = plan({"node": "aggregate", "child": A, "group_by": [], "partial": True, "exprs": [
        {"name": "c9", "expr": {"agg": "sum", "args": [c("c2")], "type": "bigint"}}]}, split=0)
    p = PushedPlan.from_dict(raw)
    assert p.partial_aggregate() is p.root and p.root.partial


def test_a_distinct_aggregate_keeps_its_distinct():
    raw = plan({"node": "aggregate", "child": A, "group_by": [], "exprs": [
        {"name": "c9", "expr": {"agg": "count", "distinct": True, "args": [c("c2")], "type": "bigint"}}]})
    assert PushedPlan.from_dict(raw).root.exprs[0][1].distinct


def window(fn: dict, frame: dict | None = None, **extra) -> dict:
    over = {"over": fn, "partition_by": [c("c2")], "order_by": [{"expr": c("c1"), "asc": True, "nulls_first": True}],
            "frame": frame or {"kind": "rows", "lower": None, "upper": 0}, "type": "bigint", **extra}
    return plan({"node": "window", "child": A, "exprs": [{"name": "c9", "expr": over}]})


@pytest.mark.parametrize("fn", WINDOW_FUNCTIONS)
def test_every_window_function(fn):
    args = [c("c1"), lit("long", 1, "int")] if fn in ("lag", "lead") else []
    p = PushedPlan.from_dict(window({"win": fn, "args": args, "type": "bigint"}))
    (name, e) = p.root.exprs[0]
    assert e.form == "over" and e.args[0].form == "win" and e.args[0].name == fn
    assert e.partition_by == (col("c2", "bigint"),) and e.order_by == (SortKey(col("c1", "bigint"), True, True),)
    assert e.frame == Frame("rows", None, 0)
    assert p.root.columns() == ["c1", "c2", "c9"]  # the child's columns, then the window's
    assert e.columns() == {"c1", "c2"}


def test_an_aggregate_over_a_window_frame():
    p = PushedPlan.from_dict(window({"agg": "sum", "args": [c("c2")], "type": "bigint"}, {"kind": "range", "lower": -2, "upper": None}))
    assert p.root.exprs[0][1].frame == Frame("range", -2, None)


@pytest.mark.parametrize("raw", [
    window({"win": "ntile", "args": [], "type": "int"}),
    window({"op": "+", "args": [c("c1"), c("c2")], "type": "bigint"}),  # no window function
    window({"win": "rank", "args": [], "type": "int"}, {"kind": "groups", "lower": None, "upper": None}),
    window({"win": "rank", "args": [], "type": "int"}, {"kind": "rows", "lower": "1", "upper": None}),
    window({"win": "rank", "args": [], "type": "int"}, {"kind": "rows", "lower": True, "upper": None}),
    plan({"node": "window", "child": A, "exprs": [{"name": "c9", "expr": c("c1")}]}),  # not a window expression
    plan({"node": "window", "child": A, "exprs": []}),
])
def test_malformed_windows_are_refused(raw):
    with pytest.raises(PlanError):
        PushedPlan.from_dict(raw)


# --- nodes ------------------------------------------------------------------------------------------


EQ = call("=", c("c2"), c("c3"))


@pytest.mark.parametrize("kind", JOIN_TYPES)
def test_every_join_type(kind):
    extra = {"exists": "c9"} if kind == "existence" else {}
    p = PushedPlan.from_dict(plan(join(kind, on=EQ, **extra), SCANS))
    assert p.root.join_type == kind and p.root.cond == Expr.call("=", "boolean", col("c2", "bigint"), col("c3", "bigint"))
    expected = {"semi": ["c1", "c2"], "anti": ["c1", "c2"], "existence": ["c1", "c2", "c9"]}.get(kind, ["c1", "c2", "c3", "c4"])
    assert p.root.columns() == expected


@pytest.mark.parametrize("kind", ["inner", "cross", "semi", "anti", "existence"])
def test_joins_that_need_no_condition(kind):
    extra = {"exists": "c9"} if kind == "existence" else {}
    assert PushedPlan.from_dict(plan(join(kind, **extra), SCANS)).root.cond is None


@pytest.mark.parametrize("kind", ["left", "right", "full"])
def test_an_outer_join_has_a_condition(kind):
    with pytest.raises(PlanError, match="has a condition"):
        PushedPlan.from_dict(plan(join(kind), SCANS))


def test_an_existence_join_names_its_boolean_column():
    with pytest.raises(PlanError, match="names its boolean column"):
        PushedPlan.from_dict(plan(join("existence", on=EQ), SCANS))


def test_union_and_expand():
    u = PushedPlan.from_dict(plan({"node": "union", "children": [A, B], "output": ["u1", "u2"]}, SCANS))
    assert u.root.columns() == ["u1", "u2"] and len(u.root.children) == 2
    e = PushedPlan.from_dict(plan({"node": "expand", "child": A, "output": ["e1", "e2"], "projections": [
        [c("c1"), c("c2")], [c("c1"), lit("null", None)]]}))
    assert e.root.columns() == ["e1", "e2"] and e.root.projections[1] == (col("c1", "bigint"), value("null", None, "bigint"))


def test_sort_and_limit_with_an_offset():
    keys = [{"expr": c("c1"), "asc": False, "nulls_first": False}]
    s = PushedPlan.from_dict(plan({"node": "sort", "child": A, "keys": keys}))
    assert s.root.keys == (SortKey(col("c1", "bigint"), False, False),)
    lim = PushedPlan.from_dict(plan({"node": "limit", "child": A, "limit": 3, "offset": 2, "keys": keys}))
    assert (lim.root.limit, lim.root.offset, lim.root.keys) == (3, 2, s.root.keys)
    plain = PushedPlan.from_dict(plan({"node": "limit", "child": A, "limit": 0}))
    assert (plain.root.limit, plain.root.offset, plain.root.keys) == (0, 0, ())
    for p in (s, lim, plain):
        assert PushedPlan.from_dict(to_dict(p)) == p


def test_a_scalar_subquery_is_its_own_scope():
    sub = {"subquery": {"node": "aggregate", "child": node(1, "c5", "c6"), "group_by": [], "exprs": [
        {"name": "c7", "expr": {"agg": "max", "args": [c("c6")], "type": "bigint"}}]}, "type": "bigint"}
    p = PushedPlan.from_dict(plan({"node": "filter", "child": A, "cond": call(">", c("c2"), sub)}, SCANS))
    assert p.root.cond.columns() == {"c2"}  # the subquery's columns are its own
    [inner] = p.root.cond.subqueries()
    assert inner.columns() == ["c7"]
    assert [n.op for n in p.root.walk()] == ["filter", "aggregate", "scan", "scan"]


@pytest.mark.parametrize("raw", [
    plan({"node": "sort", "child": {"node": "sort", "child": A, "keys": []}, "keys": []}),  # a nested sort
    plan({"node": "limit", "child": {"node": "sort", "child": A, "keys": []}, "limit": 1}),
    plan(join("outer", on=EQ), SCANS),
    plan({"node": "cube", "child": A}),
    plan({"node": "project", "child": A, "exprs": [{"name": "c2", "expr": c("c1")}]}),  # c2 defined twice
    plan({"node": "project", "child": A, "exprs": [{"name": "c9", "expr": c("c1")}, {"name": "c9", "expr": c("c2")}]}),
    plan({"node": "project", "child": A, "exprs": [{"name": "c9"}]}),
    plan({"node": "project", "child": A, "exprs": [["c9", c("c1")]]}),
    plan({"node": "project", "child": A, "exprs": [], "extra": 1}),  # unknown key of a node
    plan({"node": "filter", "child": A}),
    plan({"node": "limit", "child": A, "limit": -1}),
    plan({"node": "limit", "child": A, "limit": 1, "offset": -1}),
    plan({"node": "limit", "child": A, "limit": True}),
    plan({"node": "limit", "child": A}),
    plan({"node": "limit", "child": A, "limit": 1, "keys": ["c1"]}),
    plan({"node": "union", "children": [A], "output": ["u1", "u2"]}),  # one child
    plan({"node": "union", "children": [A, node(1, "c3")], "output": ["u1", "u2"]},
         [SCANS[0], scan("s.b", ["k"])]),  # widths differ
    plan({"node": "expand", "child": A, "output": ["e1"], "projections": [[c("c1"), c("c2")]]}),
    plan({"node": "expand", "child": A, "output": ["e1"], "projections": []}),
    plan({"node": "filter", "child": A, "cond": call(">", c("c2"), {"subquery": B, "type": "bigint"})}, SCANS),  # 2 columns
    plan(join("inner", on=EQ, left=A, right=node(1, "c1", "c4")), SCANS),  # c1 on both sides
    plan(join("existence", on=EQ, exists="c1"), SCANS),  # its column clashes with the left's
])
def test_malformed_plans_are_refused(raw):
    with pytest.raises(PlanError):
        PushedPlan.from_dict(raw)


def test_a_projection_may_pass_a_column_through_under_its_own_name():
    p = PushedPlan.from_dict(plan({"node": "project", "child": A, "exprs": [{"name": "c1", "expr": c("c1")}]}))
    assert p.root.columns() == ["c1"]


def test_one_subplan_in_two_branches_is_two_scopes():
    # Spark copies a semi join's subquery below an aggregate: the same names in both branches.
    right = {"node": "filter", "child": B, "cond": call("IS_NOT_NULL", c("c3"))}
    raw = plan(join("semi", on=EQ, right=right, left={"node": "filter", "child": A, "cond": call(">", c("c1"), {
        "subquery": {"node": "aggregate", "child": join("semi", on=EQ, right=right), "group_by": [], "exprs": [
            {"name": "c9", "expr": {"agg": "count_star", "args": [], "type": "bigint"}}]}, "type": "bigint"})}), SCANS)
    assert PushedPlan.from_dict(raw).root.join_type == "semi"


# --- values, JSON and plans built in Python ---------------------------------------------------------


def test_to_dict_is_the_raw_json_and_raw_is_not_part_of_equality():
    raw = plan(A)
    p = PushedPlan.from_dict(raw)
    assert p.to_dict() is raw
    assert p == PushedPlan((Scan("s.a", ("id", "k")),), Node("scan", scan=0, output=("c1", "c2")))


def test_parsed_plans_are_hashable_values():
    text = json.dumps(plan(node(0, "c1"), [scan("s.a", ["id"], [call("IN", c("id"), lit("long", 1))])]))
    a, b = PushedPlan.from_json(text), PushedPlan.from_json(text)
    assert a == b and hash(a) == hash(b) and hash(a.scans) == hash(b.scans)


def round_trip_plan() -> dict:
    """Every node kind and many expression forms, as the shim writes them."""
    year = {"op": "extract", "type": "int", "field": "YEAR", "args": [c("c4", "date")]}
    filtered_b = {"node": "filter", "child": B, "cond": call("LIKE", c("c4", "string"), lit("string", "a%", "string"))}
    projected = {"node": "project", "child": join("left", on=EQ, left=A, right=filtered_b),
                 "exprs": [{"name": "c2", "expr": c("c2")}, {"name": "c13", "expr": year}]}
    existence = join("existence", on=call("=", c("c6"), c("c7")), exists="c11", left=node(0, "c5", "c6"),
                     right=node(1, "c7", "c8"))
    union = {"node": "union", "output": ["u1", "u2"], "children": [
        projected, {"node": "project", "child": existence, "exprs": [
            {"name": "c5", "expr": c("c5")}, {"name": "c14", "expr": call("CASE_WHEN", c("c11", "boolean"), lit(
                "long", 1, "int"), lit("null", None, "int"), type_="int")}]}]}
    expand = {"node": "expand", "child": union, "output": ["e1", "e2"],
              "projections": [[c("u1"), c("u2", "int")], [c("u1"), lit("null", None, "int")]]}
    aggregate = {"node": "aggregate", "child": expand, "group_by": [c("e1")], "partial": True, "exprs": [
        {"name": "e1", "expr": c("e1")},
        {"name": "c9", "expr": {"agg": "sum", "distinct": True, "args": [c("e2", "int")], "type": "bigint"}},
        {"name": "c10", "expr": {"agg": "count_star", "distinct": False, "args": [], "type": "bigint"}}]}
    lag = {"over": {"win": "lag", "args": [c("c9"), lit("long", 1, "int")], "type": "bigint"}, "partition_by": [],
           "order_by": [{"expr": c("c9"), "asc": True, "nulls_first": False}],
           "frame": {"kind": "rows", "lower": None, "upper": None}, "type": "bigint"}
    windowed = {"node": "window", "child": aggregate, "exprs": [{"name": "c12", "expr": lag}]}
    root = {"node": "limit", "child": windowed, "limit": 5, "offset": 1,
            "keys": [{"expr": c("c9"), "asc": False, "nulls_first": True}]}
    scans = [scan("s.a", ["id", "k"], [call(">=", c("id"), lit("timestamp", -1, "timestamp"))]), scan("s.b", ["k", "w"])]
    return plan(root, scans, split=1)


def test_to_dict_of_a_parsed_plan_rebuilt_in_python_is_its_json():
    # from_dict, then to_dict of the plan rebuilt without its raw JSON: the same plan again.
    p = PushedPlan.from_dict(round_trip_plan())
    assert {n.op for n in p.root.walk()} == set(NODES) - {"sort"}  # a sort only at a root: below
    rebuilt = to_dict(p)
    assert PushedPlan.from_dict(rebuilt) == p
    assert PushedPlan.from_json(to_json(p)) == p


def test_expr_dict_is_the_json_form_of_an_expression():
    e = Expr.call("IS_NULL", "boolean", Expr.call("=", "boolean", col("a", "int"), value("long", 1, "int")))
    assert expr_dict(e) == {"op": "IS_NULL", "type": "boolean", "args": [
        {"op": "=", "type": "boolean", "args": [{"col": "a", "type": "int"}, {"lit": {"type": "long", "value": 1}, "type": "int"}]}]}


def test_table_plan_reads_a_tables_rows_a_task_per_partition():
    f = cmp("gt", "id", "long", 3)
    p = table_plan("public.t", ["id", "v"], (f,))
    assert p.scans == (Scan("public.t", ("id", "v"), (f,)),) and p.row_scan and p.split == 0
    assert p.root.columns() == ["id", "v"]
    assert PushedPlan.from_json(to_json(p)) == p


def test_count_plan_is_one_task_of_count_star():
    p = count_plan("public.t")
    assert p.one_task and p.scans == (Scan("public.t", ()),) and p.partial_aggregate() is None
    assert p.root.op == "aggregate" and p.root.exprs == (("count", agg("count_star")),)
    assert PushedPlan.from_json(to_json(p)) == p


def test_rows_of_a_scan_is_its_table_part_alone():
    f = cmp("gt", "w", "long", 0)
    p = PushedPlan.from_dict(plan(join("inner", on=EQ), [SCANS[0], scan("s.b", ["k", "w"], [expr_dict(f)])], split=0))
    rows = p.rows_of(1)
    assert rows.scans == (Scan("s.b", ("k", "w"), (f,)),) and rows.row_scan and rows.split == 0
    assert rows.root == Node("scan", scan=0, output=("k", "w"))


def test_with_filter_adds_conjuncts_to_one_scan_and_forgets_the_raw_json():
    p = PushedPlan.from_dict(plan(join("inner", on=EQ), SCANS, split=0))
    lo, hi = cmp("ge", "id", "long", 10), cmp("lt", "id", "long", 20)
    ranged = p.with_filter(0, (lo, hi))
    assert ranged.scans[0].filter == (lo, hi) and ranged.scans[1] == p.scans[1] and p.scans[0].filter == ()
    assert ranged.root == p.root and ranged.split == 0
    assert ranged.to_dict() == to_dict(ranged) and ranged.to_dict()["scans"][0]["filter"] == [expr_dict(lo), expr_dict(hi)]
    assert ranged.with_filter(0, (cmp("ne", "id", "long", 15),)).scans[0].filter[:2] == (lo, hi)


def test_the_columns_a_role_must_be_allowed_to_select():
    # What access checks ask the source for (datasource: sorted(scan.referenced())): a scan's
    # columns and every column its filter reads, nothing for count(*).
    assert Scan("s.t", ("id", "region", "secret")).referenced() == {"id", "region", "secret"}
    assert Scan("s.t", ()).referenced() == set()  # SELECT 1, count(*) in Spark
    assert count_plan("s.t").scans[0].referenced() == set()
    assert Scan("s.t", ("region",), (is_not_null("secret"),)).referenced() == {"region", "secret"}
    grouped = one_scan(["region", "id"], aggregate=[("region", col("region")), ("n", agg("sum", col("id")))],
                       group_by=[col("region")])
    assert grouped.scans[0].referenced() == {"id", "region"}


def test_node_columns_and_expressions():
    n = Node("filter", (scan_node(0, "a", "b"),), cond=op(">", col("a"), value("long", 1)))
    assert n.columns() == ["a", "b"] and n.expressions() == [n.cond]
    lim = Node("limit", (n,), keys=(SortKey(col("b")),), limit=1)
    assert lim.columns() == ["a", "b"] and lim.expressions() == [col("b")]
    assert [x.op for x in lim.walk()] == ["limit", "filter", "scan"]


@pytest.mark.parametrize("text, expected", [
    ("decimal(12,2)", (12, 2)), ("DECIMAL(38, 0)", (38, 0)), (" decimal(1,1) ", (1, 1)), ("decimal(38,38)", (38, 38)),
    ("decimal(39,2)", None), ("decimal(2,3)", None), ("decimal(0,0)", None), ("decimal(a,b)", None), ("decimal", None),
    ("double", None), ("int", None),
])
def test_decimal_type(text, expected):
    assert decimal_type(text) == expected


