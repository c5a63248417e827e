"""rewrite/subplan.py: the pushed-subplan JSON the shim sends, parsed at the boundary."""

from __future__ import annotations

import json

import pytest
from unit_support import lit_json

from htap.errors import HtapError
from htap.rewrite.subplan import (
    AGGREGATE_FUNCTIONS,
    COMPARISONS,
    LITERAL_TYPES,
    STRING_MATCHES,
    Aggregate,
    Literal,
    Predicate,
    PushedSubplan,
    SubplanError,
)


def test_empty_and_missing_text_is_the_identity_subplan():
    for text in (None, ""):
        sp = PushedSubplan.from_json(text)
        assert sp == PushedSubplan()
        assert sp.columns is None and sp.filters == () and not sp.aggregating
        assert sp.referenced_columns() == set()


def test_an_empty_object_reads_every_column():
    sp = PushedSubplan.from_json("{}")
    assert sp.columns is None
    assert sp.to_dict() == {}


def test_columns_keep_their_order_and_an_empty_list_is_not_every_column():
    assert PushedSubplan.from_dict({"columns": ["b", "a"]}).columns == ("b", "a")
    assert PushedSubplan.from_dict({"columns": []}).columns == ()


@pytest.mark.parametrize("op", COMPARISONS + STRING_MATCHES)
def test_every_binary_filter_form(op):
    sp = PushedSubplan.from_dict({"filters": [{"op": op, "col": "c", "value": lit_json("string", "x")}]})
    assert sp.filters == (Predicate(op, col="c", value=Literal("string", "x")),)


@pytest.mark.parametrize("type_", LITERAL_TYPES)
def test_every_literal_type(type_):
    value = {"null": None, "boolean": True, "long": 7, "double": "NaN", "decimal": "1.50", "string": "s",
             "date": "2024-02-29", "timestamp": -1, "timestamp_ntz": "2024-02-29T01:02:03.5"}[type_]
    sp = PushedSubplan.from_dict({"filters": [{"op": "eq", "col": "c", "value": lit_json(type_, value)}]})
    assert sp.filters[0].value == Literal(type_, value)


def test_a_literal_without_value_is_null_valued():
    sp = PushedSubplan.from_dict({"filters": [{"op": "eq", "col": "c", "value": {"type": "null"}}]})
    assert sp.filters[0].value == Literal("null", None)


def test_in_is_null_not_and_or_nesting():
    raw = {
        "filters": [
            {"op": "in", "col": "a", "values": [lit_json("long", 1), lit_json("null")]},
            {"op": "not", "arg": {"op": "or", "args": [
                {"op": "is_null", "col": "b"},
                {"op": "and", "args": [{"op": "is_not_null", "col": "c"}, {"op": "lt", "col": "d", "value": lit_json("double", 1.5)}]},
            ]}},
        ]
    }
    sp = PushedSubplan.from_json(json.dumps(raw))
    in_, neg = sp.filters
    assert in_ == Predicate("in", col="a", values=(Literal("long", 1), Literal("null", None)))
    assert neg.op == "not" and len(neg.args) == 1
    disj = neg.args[0]
    assert disj.op == "or" and disj.col is None
    assert disj.args[0] == Predicate("is_null", col="b")
    assert disj.args[1] == Predicate("and", args=(Predicate("is_not_null", col="c"), Predicate("lt", col="d", value=Literal("double", 1.5))))
    assert neg.columns() == {"b", "c", "d"}
    assert sp.referenced_columns() == {"a", "b", "c", "d"}


def test_in_with_no_values_parses_as_an_empty_list():
    sp = PushedSubplan.from_dict({"filters": [{"op": "in", "col": "a", "values": []}]})
    assert sp.filters[0].values == ()


@pytest.mark.parametrize("fn", [f for f in AGGREGATE_FUNCTIONS if f != "avg"])  # avg: typed, below
def test_every_aggregate(fn):
    raw = {"fn": fn} if fn == "count_star" else {"fn": fn, "col": "x"}
    sp = PushedSubplan.from_dict({"group_by": ["g"], "aggregates": [raw]})
    assert sp.aggregates == (Aggregate(fn, None if fn == "count_star" else "x"),)
    assert sp.aggregating
    assert sp.referenced_columns() == ({"g"} if fn == "count_star" else {"g", "x"})


def test_group_by_alone_aggregates_and_aggregates_alone_aggregate():
    assert PushedSubplan.from_dict({"group_by": ["g"]}).aggregating
    assert PushedSubplan.from_dict({"aggregates": [{"fn": "count_star"}]}).aggregating
    assert not PushedSubplan.from_dict({"columns": ["a"], "filters": []}).aggregating


def test_referenced_columns_union_projection_filters_groups_and_aggregates():
    sp = PushedSubplan.from_dict({
        "columns": ["p"],
        "filters": [{"op": "gt", "col": "f", "value": lit_json("long", 1)}],
        "group_by": ["g"],
        "aggregates": [{"fn": "count_star"}, {"fn": "sum", "col": "s"}],
    })
    assert sp.referenced_columns() == {"p", "f", "g", "s"}


def test_to_dict_is_the_raw_json_and_raw_is_not_part_of_equality():
    raw = {"columns": ["a"], "filters": []}
    sp = PushedSubplan.from_dict(raw)
    assert sp.to_dict() is raw
    assert sp == PushedSubplan(columns=("a",))  # raw differs, value is equal


def test_parsed_subplans_are_hashable_values():
    text = json.dumps({"filters": [{"op": "in", "col": "a", "values": [lit_json("long", 1)]}]})
    a, b = PushedSubplan.from_json(text), PushedSubplan.from_json(text)
    assert a.filters == b.filters and hash(a.filters) == hash(b.filters)


# --- errors -----------------------------------------------------------------------------------


def test_unknown_top_level_keys_are_named():
    with pytest.raises(SubplanError, match=r"unknown keys \['having', 'offset'\]"):
        PushedSubplan.from_dict({"columns": ["a"], "offset": 1, "having": [], "limit": 3})


def test_invalid_json_is_a_subplan_error():
    with pytest.raises(SubplanError, match="not valid JSON"):
        PushedSubplan.from_json("{columns: [}")


def test_subplan_errors_are_htap_errors():
    assert issubclass(SubplanError, HtapError)


@pytest.mark.parametrize(
    "raw",
    [
        {"op": "like", "col": "a", "value": lit_json("string", "x")},
        {"col": "a", "value": lit_json("string", "x")},
        {"op": "xor", "args": []},
    ],
)
def test_unknown_filters_are_refused(raw):
    with pytest.raises(SubplanError, match="unknown pushed filter"):
        PushedSubplan.from_dict({"filters": [raw]})


def test_an_unknown_filter_nested_inside_not_is_refused():
    with pytest.raises(SubplanError, match="unknown pushed filter"):
        PushedSubplan.from_dict({"filters": [{"op": "not", "arg": {"op": "regexp", "col": "a"}}]})


@pytest.mark.parametrize("literal", [{"type": "interval", "value": 1}, {"value": 1}, {"type": None}])
def test_unknown_literal_types_are_refused(literal):
    with pytest.raises(SubplanError, match="unknown literal type"):
        PushedSubplan.from_dict({"filters": [{"op": "eq", "col": "a", "value": literal}]})


def test_an_unknown_literal_type_inside_in_is_refused():
    with pytest.raises(SubplanError, match="unknown literal type"):
        PushedSubplan.from_dict({"filters": [{"op": "in", "col": "a", "values": [lit_json("long", 1), {"type": "uuid", "value": "x"}]}]})


@pytest.mark.parametrize("raw", [{"fn": "sum_distinct", "col": "a"}, {"col": "a"}])
def test_unknown_aggregates_are_refused(raw):
    with pytest.raises(SubplanError, match="unknown pushed aggregate"):
        PushedSubplan.from_dict({"aggregates": [raw]})


AVG = {"fn": "avg", "arg": {"col": "a", "type": "decimal(15,2)"}, "type": "decimal(19,6)"}


def test_a_pushed_avg_is_typed_and_complete():
    sub = PushedSubplan.from_dict({"aggregates": [AVG], "complete": True, "one_task": True})
    assert sub.aggregates[0].fn == "avg" and sub.aggregates[0].type == "decimal(19,6)"
    assert sub.referenced_columns() == {"a"}


@pytest.mark.parametrize("raw, complete", [
    ({"fn": "avg", "col": "a", "type": "decimal(19,6)"}, True),  # untyped input: its scale unknown
    ({**AVG, "type": "double"}, True),
    ({**AVG, "arg": {"col": "a", "type": "int"}}, True),
    ({**AVG, "type": "decimal(19,1)"}, True),  # a smaller scale than the input's
    (AVG, False),  # an AVG has no partial form
])
def test_a_pushed_avg_that_is_not_a_complete_decimal_average_is_refused(raw, complete):
    with pytest.raises(SubplanError, match="AVG"):
        PushedSubplan.from_dict({"aggregates": [raw], "complete": complete})


def test_the_columns_a_role_must_be_allowed_to_select():
    every = ["id", "region", "secret"]
    assert PushedSubplan.from_dict({}).columns_to_check(every) == every  # SELECT *
    assert PushedSubplan.from_dict({"columns": []}).columns_to_check(every) == []  # SELECT 1, count(*) in Spark
    assert PushedSubplan.from_dict({"aggregates": [{"fn": "count_star"}]}).columns_to_check(every) == []
    assert PushedSubplan.from_dict({
        "columns": ["region"], "filters": [{"op": "is_not_null", "col": "secret"}],
    }).columns_to_check(every) == ["region", "secret"]
    assert PushedSubplan.from_dict({
        "group_by": ["region"], "aggregates": [{"fn": "sum", "col": "id"}],
    }).columns_to_check(every) == ["id", "region"]
