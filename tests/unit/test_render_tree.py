"""rewrite/tree.py, pushed trees (whole-subtree pushdown): golden SQL for DuckDB, Postgres and
MySQL, and the DuckDB SQL run over in-memory tables against hand-written expectations — semi and
anti joins (NOT IN's null-aware condition with NULL keys on either side), aggregates between
joins, scalar subqueries, top-N — and malformed trees rejected."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp
from decimal_support import avg_of, spark_avg, unscaled_decimals
from unit_support import check_golden

from htap import engine
from htap.rewrite import dialects
from htap.rewrite.subplan import PushedSubplan, SubplanError
from htap.rewrite.tree import render_tree_over

COLUMNS = {"a": ["id", "k", "v"], "b": ["id", "k", "w"], "d": ["k", "v"]}


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


AVG = avg_of(c("c4", "decimal(15,2)"), 15, 2)

CASES: dict[str, dict] = {
    "semi join (IN)": tree(top({"node": "join", "type": "semi", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))})),
    "null-aware anti join (NOT IN)": tree(top({"node": "join", "type": "anti", "left": A, "right": B, "on": NOT_IN})),
    "anti join (NOT EXISTS)": tree(top({"node": "join", "type": "anti", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))})),
    # Spark's optimizer pushes semi/anti joins below inner joins (TPC-H Q21): one flat SELECT, the
    # NOT EXISTS beside the join, so that the target orders the join first when it is selective.
    "NOT IN below an inner join: one flat SELECT": tree(top({"node": "join", "type": "inner", "on": op(
        "=", c("c1"), c("c5")), "left": {"node": "join", "type": "anti", "left": A, "right": B, "on": NOT_IN},
        "right": {"node": "filter", "child": scan(2, "c5"), "cond": op(">", c("c5"), {
            "lit": {"type": "long", "value": 2}, "type": "bigint"})}}), [*LEAVES, leaf("a", ["id"])]),
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
    "AVG of decimals: exact division, HALF_UP": tree({"node": "aggregate", "group_by": [c("c2")], "exprs": [
        {"name": "c2", "expr": c("c2")},
        {"name": "c5", "expr": AVG}], "child": scan(0, "c2", "c4")}, [leaf("d", ["k", "v"])]),
    "left join, top-N": tree({"node": "limit", "limit": 3, "child": {
        "node": "join", "type": "left", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))},
        "keys": [{"expr": c("c4"), "asc": False, "nulls_first": False}, {"expr": c("c1"), "asc": True, "nulls_first": True}]}),
    # MySQL/MariaDB have no FULL JOIN: sqlglot's MySQL generator spells it as a LEFT JOIN UNION ALL
    # the right side's rows with no match (a RIGHT JOIN filtered by NOT EXISTS of the condition).
    "full outer join": tree({"node": "join", "type": "full", "left": A, "right": B, "on": op("=", c("c2"), c("c3"))}),
}


def relations(subplan: PushedSubplan) -> list[exp.Expression]:
    return [exp.Table(this=exp.to_identifier(name.split(".")[1], quoted=True), db=exp.to_identifier("s", quoted=True))
            for name, _own in subplan.table_reads()]


def columns(subplan: PushedSubplan) -> list[list[str]]:
    return [COLUMNS[name.split(".")[1]] for name, _own in subplan.table_reads()]


def sql(case: str, dialect: str) -> str:
    subplan = PushedSubplan.from_dict(CASES[case])
    query = render_tree_over(subplan, relations(subplan), columns(subplan))
    return (query if dialect == "duckdb" else dialects.for_source(query, dialect)).sql(dialect)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_golden_tree_sql(dialect):
    check_golden(f"tree_{dialect}.sql", {case: sql(case, dialect) for case in CASES})


def test_full_join_is_no_full_join_for_mysql():
    """MariaDB parses `FULL` as a table alias and rejects the query: the MySQL text must spell it
    out (run by MariaDB in tests/test_mysql_subtree_pushdown.py)."""
    text = sql("full outer join", "mysql")
    assert "FULL" not in text.upper() and "UNION ALL" in text and "NOT EXISTS" in text, text


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
        # Below an inner join with a's ids above 2: the same NOT IN, then the join.
        assert run(with_null, "NOT IN below an inner join: one flat SELECT") == []
        # The NULL filtered out of the set: a's NULL key still is not NOT IN (unknown).
        assert run(with_null, "NOT IN over a filtered side") == [(4, 4)]
    finally:
        with_null.close()
    empty = connect([])
    try:  # NOT IN over an empty set holds for every row, NULL keys included
        assert run(empty, "null-aware anti join (NOT IN)") == [(1, 1), (2, None), (3, 3), (4, 4), (5, 1)]
        assert run(empty, "NOT IN below an inner join: one flat SELECT") == [(3, 3, 3), (4, 4, 4), (5, 1, 5)]
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
    tree({"node": "project", "child": A, "exprs": [{"name": "c9", "expr": op("/", c("c1"), c("c2"), type="double")}]}),
    tree({"node": "project", "child": A, "exprs": [{"name": "c9", "expr": op("/", c("c1", "decimal(4,2)"), type="decimal(8,6)")}]}),
    {"tree": {"leaves": [], "root": A}},
])
def test_malformed_trees_are_subplan_errors(raw):
    with pytest.raises(SubplanError):
        PushedSubplan.from_dict(raw)



def test_general_like_keeps_spark_semantics_with_escapes():
    """LIKE (a pushed tree's general pattern): '%' and '_' as in Spark, '\\' escaping them."""
    from htap.rewrite import render
    from htap.rewrite.subplan import _expr

    words = ["a%b", "axb", "a_b", "ab", "special requests", "special\nrequests", None, "A%B"]
    con = engine.cursor()
    try:
        con.execute("CREATE OR REPLACE TABLE w (s TEXT)")
        con.executemany("INSERT INTO w VALUES (?)", [(x,) for x in words])
        for pattern, expected in [("a\\%b", ["a%b"]), ("a_b", ["a%b", "axb", "a_b"]), ("a\\_b", ["a_b"]),
                                  ("%special%requests%", ["special requests", "special\nrequests"]), ("a%", ["a%b", "axb", "a_b", "ab"])]:
            like = _expr({"op": "LIKE", "type": "boolean", "args": [
                {"col": "s", "type": "string"}, {"lit": {"type": "string", "value": pattern}, "type": "string"}]})
            q = exp.select("s").from_("w").where(render.expr(like))
            assert sorted(r[0] for r in con.sql(q.sql("duckdb")).fetchall()) == sorted(expected), pattern
            for dialect in ("postgres", "mysql"):
                assert "ESCAPE" in q.sql(dialect), dialect
    finally:
        con.close()


def test_a_predicate_compared_with_true_is_the_bare_predicate_with_its_nulls():
    """Spark hands a boolean placeholder (a general LIKE) used as a predicate over as `p = TRUE`
    (TPC-H Q13: `NOT (o_comment LIKE ... = TRUE)`). Rendered bare, so that DuckDB pushes it into
    the scan; the rows kept are the same under three-valued logic, NULL included."""
    from htap.rewrite import render
    from htap.rewrite.dialects import REPLICA
    from htap.rewrite.subplan import _expr

    like = {"op": "LIKE", "type": "boolean", "args": [
        {"col": "s", "type": "string"}, {"lit": {"type": "string", "value": "%special%requests%"}, "type": "string"}]}
    true = {"lit": {"type": "boolean", "value": True}, "type": "boolean"}
    words = ["special requests", "plain", None, "a special b requests"]
    con = engine.cursor()
    try:
        con.execute("CREATE OR REPLACE TABLE w (s TEXT)")
        con.executemany("INSERT INTO w VALUES (?)", [(x,) for x in words])
        for cond, expected in [
            ({"op": "=", "type": "boolean", "args": [like, true]}, ["special requests", "a special b requests"]),
            ({"op": "=", "type": "boolean", "args": [true, like]}, ["special requests", "a special b requests"]),
            ({"op": "NOT", "type": "boolean", "args": [{"op": "=", "type": "boolean", "args": [like, true]}]}, ["plain"]),
        ]:
            q = exp.select("s").from_("w").where(render.expr(_expr(cond)))
            assert "TRUE" not in q.sql(REPLICA)
            for dialect in (REPLICA, "duckdb"):
                assert sorted(r[0] for r in con.sql(q.sql(dialect)).fetchall()) == sorted(expected), cond
        # a comparison of two boolean columns is no such predicate: kept as it is
        both = _expr({"op": "=", "type": "boolean", "args": [{"col": "x", "type": "boolean"}, {"col": "y", "type": "boolean"}]})
        assert exp.select("x").from_("w").where(render.expr(both)).sql(REPLICA).endswith('"x" = "y"')
    finally:
        con.close()


# --- AVG of decimals: the rendered division against Spark's own steps ------------------------------


def avg_sql(p: int, s: int) -> str:
    raw = tree({"node": "aggregate", "group_by": [], "exprs": [{"name": "c5", "expr": avg_of(c("c4", f"decimal({p},{s})"), p, s)}],
                "child": scan(0, "c4")}, [leaf("d", ["v"])])
    subplan = PushedSubplan.from_dict(raw)
    return render_tree_over(subplan, relations(subplan), [["k", "v"]]).sql("duckdb")


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


GROUPED = {"node": "aggregate", "group_by": [c("c3")], "child": B, "exprs": [
    {"name": "c3", "expr": c("c3")}, {"name": "c6", "expr": {"agg": "sum", "args": [c("c4")], "type": "bigint"}}]}
D = scan(2, "c7", "c8")  # d.k, d.v


def grouped_join(left: dict, extra: dict | None = None) -> dict:
    """`left` inner joined on c2 with b's sums per key (a decorrelated correlated subquery's shape,
    TPC-H Q17), maybe with a second, non-equality conjunct."""
    on = op("=", c("c2"), c("c3"))
    return tree({"node": "join", "type": "inner", "left": left, "right": {"node": "filter", "child": GROUPED,
                 "cond": op("IS_NOT_NULL", c("c6"))}, "on": op("AND", on, extra) if extra else on},
                [*LEAVES, leaf("d", ["k", "v"])])


CASES["aggregate joined on its grouping column: its input reduced by EXISTS"] = grouped_join(A)
CASES["aggregate joined on its grouping column below another join: EXISTS over one side"] = grouped_join(
    {"node": "join", "type": "inner", "left": A, "right": D, "on": op("=", c("c2"), c("c7"))}, op("<", c("c1"), c("c6")))


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.tuples(st.integers(0, 9), st.none() | st.integers(0, 4)), max_size=8),
       b=st.lists(st.tuples(st.none() | st.integers(0, 4), st.integers(-5, 5)), max_size=12),
       d=st.lists(st.none() | st.integers(0, 4), max_size=4))
def test_aggregate_joined_on_its_grouping_column_keeps_exactly_the_joined_groups(a, b, d):
    """The EXISTS that reduces the aggregate's input (tree.reduce_grouped_joins) drops only groups
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
    text = sql("aggregate joined on its grouping column below another join: EXISTS over one side", "duckdb")
    exists = text[text.index("EXISTS"):]
    assert '"s"."b"' in text and '"s"."d"' not in exists.split("GROUP BY")[0], text
