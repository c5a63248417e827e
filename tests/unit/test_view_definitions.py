"""htap.rewrite.views: which view definitions the replica can keep exact, what it keeps for them,
and the reason it gives for each it refuses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from htap.rewrite.views import ROWS_STATE, Output, State, ViewDefinitionError, parse_view

ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.date32()), ("status", pa.string()),
                    ("amount", pa.decimal128(12, 2)), ("qty", pa.int32()), ("weight", pa.float64())])
TABLES = {"shop.orders": ORDERS}


def test_a_dashboard_view_keeps_counts_beside_its_sums_and_averages():
    d = parse_view("SELECT region, day, sum(amount) AS revenue, count(*) AS orders, avg(qty), min(amount), max(day)"
                   " FROM shop.orders WHERE status IN ('paid', 'shipped') AND day >= DATE '2024-01-01'"
                   " GROUP BY region, day", TABLES)
    assert d.table == "shop.orders" and d.groups == ("region", "day")
    assert d.states == (State(ROWS_STATE, "count", None), State("_sum_amount", "sum", "amount"),
                        State("_count_amount", "count", "amount"), State("_sum_qty", "sum", "qty"),
                        State("_count_qty", "count", "qty"), State("_min_amount", "min", "amount"),
                        State("_max_day", "max", "day"))
    assert d.outputs == (Output("region", "group", (), "region"), Output("day", "group", (), "day"),
                         Output("revenue", "sum", ("_sum_amount",), "amount"), Output("orders", "count", (ROWS_STATE,), None),
                         Output("avg_qty", "avg", ("_sum_qty", "_count_qty"), "qty"),
                         Output("min_amount", "min", ("_min_amount",), "amount"),
                         Output("max_day", "max", ("_max_day",), "day"))
    assert d.filter_sql == "\"status\" IN ('paid', 'shipped') AND \"day\" >= CAST('2024-01-01' AS DATE)"


def test_an_aggregate_used_twice_is_kept_once():
    d = parse_view("SELECT region, sum(qty) AS a, avg(qty) AS b, count(qty) AS c FROM shop.orders GROUP BY region", TABLES)
    assert [s.name for s in d.states] == [ROWS_STATE, "_sum_qty", "_count_qty"]


@pytest.mark.parametrize("sql, reason", [
    ("SELECT region, count(DISTINCT status) FROM shop.orders GROUP BY region", "DISTINCT aggregate"),
    ("SELECT region, sum(weight) FROM shop.orders GROUP BY region", "floating point"),
    ("SELECT region, avg(weight) FROM shop.orders GROUP BY region", "floating point"),
    ("SELECT region, sum(status) FROM shop.orders GROUP BY region", "is not a number"),
    ("SELECT region, sum(qty * 2) FROM shop.orders GROUP BY region", "must be a column"),
    ("SELECT upper(region), count(*) FROM shop.orders GROUP BY upper(region)", "expressions are not built yet"),
    ("SELECT status, count(*) FROM shop.orders GROUP BY region", "not in GROUP BY"),
    ("SELECT region, count(*) FROM shop.orders GROUP BY region HAVING count(*) > 1", "HAVING"),
    ("SELECT region, count(*) FROM shop.orders GROUP BY region ORDER BY region", "ORDER BY"),
    ("SELECT region, count(*) FROM shop.orders GROUP BY region LIMIT 5", "LIMIT"),
    ("SELECT count(*) FROM shop.orders", "needs GROUP BY"),
    ("SELECT o.region, count(*) FROM shop.orders o JOIN shop.orders p ON o.id = p.id GROUP BY o.region", "join"),
    ("SELECT region, count(*) FROM shop.items GROUP BY region", "not an HTAP table of this source"),
    ("SELECT region, count(*) FROM orders GROUP BY region", "<schema>.<table>"),
    ("SELECT region, count(*) FROM shop.orders WHERE qty > id GROUP BY region", "only literals"),
    ("SELECT region, count(*) FROM shop.orders WHERE status > 'b' GROUP BY region", "collation"),
    ("SELECT region, count(*) FROM shop.orders WHERE region LIKE 'e%' GROUP BY region", "not maintainable"),
    ("SELECT region, count(*) FROM shop.orders WHERE id IN (SELECT 1) GROUP BY region", "subquery"),
    ("SELECT region, count(*) FROM shop.orders WHERE nope = 1 GROUP BY region", "no column 'nope'"),
    ("SELECT region, count(*) AS n, sum(qty) AS n FROM shop.orders GROUP BY region", "two columns 'n'"),
    ("SELECT region, rank() OVER (ORDER BY region) FROM shop.orders GROUP BY region", "window"),
    ("DELETE FROM shop.orders", "one SELECT"),
    ("SELECT region, count(* FROM shop.orders", "does not parse"),
])
def test_what_cannot_be_kept_exact_is_refused_with_the_reason(sql, reason):
    with pytest.raises(ViewDefinitionError, match=reason):
        parse_view(sql, TABLES)


CUSTOMERS = pa.schema([("id", pa.int32()), ("region", pa.string()), ("tier", pa.int32())])
JOINED = {**TABLES, "shop.customers": CUSTOMERS}
KEYS = {"shop.orders": ("id",), "shop.customers": ("id",)}


def test_a_join_with_a_dimension_by_its_key_names_its_columns_alias__column():
    sql = ("SELECT c.region AS customer_region, status, sum(o.amount), count(*) FROM shop.orders o"
           " JOIN shop.customers c ON o.qty = c.id WHERE c.tier IN (1, 2) AND o.region = 'eu'"
           " GROUP BY c.region, status")
    d = parse_view(sql, JOINED, KEYS)
    assert d.table == "shop.orders" and d.groups == ("c__region", "status")
    [dim] = d.dimensions
    assert (dim.table, dim.alias, dim.on) == ("shop.customers", "c", (("qty", "id"),))
    assert set(dim.columns) == {"id", "region", "tier"}
    assert d.filter_sql == "\"c__tier\" IN (1, 2) AND \"region\" = 'eu'"
    assert d.outputs[0] == Output("customer_region", "group", (), "c__region")
    assert type(d).from_json(d.to_json()) == d


def test_a_definition_stored_before_joins_existed_loads_without_dimensions():
    d = parse_view("SELECT region, count(*) FROM shop.orders GROUP BY region", TABLES)
    stored = d.to_json().replace('"dimensions": [], ', "")
    assert "dimensions" not in stored and type(d).from_json(stored) == d


@pytest.mark.parametrize("sql, reason", [
    ("SELECT c.region, count(*) FROM shop.orders o JOIN shop.customers c ON o.qty = c.tier GROUP BY c.region",
     "must cover its primary key"),
    ("SELECT c.region, count(*) FROM shop.orders o RIGHT JOIN shop.customers c ON o.qty = c.id GROUP BY c.region",
     "only an inner JOIN"),
    ("SELECT c.region, count(*) FROM shop.orders o JOIN shop.customers c USING (id) GROUP BY c.region",
     "only an inner JOIN"),
    ("SELECT c.region, count(*) FROM shop.orders o JOIN shop.customers c ON o.status = c.id GROUP BY c.region",
     "differ in type"),
    ("SELECT region, count(*) FROM shop.orders o JOIN shop.customers c ON o.qty = c.id GROUP BY region",
     "qualify it"),
    ("SELECT x.region, count(*) FROM shop.orders o JOIN shop.customers c ON o.qty = c.id GROUP BY x.region",
     "names no table of the view"),
])
def test_joins_that_cannot_be_kept_are_refused_with_the_reason(sql, reason):
    with pytest.raises(ViewDefinitionError, match=reason):
        parse_view(sql, JOINED, KEYS)


def test_a_views_sql_for_its_past_reads_every_table_as_of_then():
    """Spark has no time travel on views: the catalog's refusal gives the view's SQL with each
    table read `FOR VERSION|TIMESTAMP AS OF`, which ViewRewrite answers from the view."""
    from htap.rewrite.views import spark_view_sql

    sql = "SELECT st.region, count(*) FROM s.sales f JOIN s.stores st ON f.store_id = st.id GROUP BY st.region"
    assert spark_view_sql(sql, "shop", "0/16B3748") == (
        "SELECT st.region, COUNT(*) FROM shop.s.sales VERSION AS OF '0/16B3748' AS f"
        " JOIN shop.s.stores VERSION AS OF '0/16B3748' AS st ON f.store_id = st.id GROUP BY st.region")
    assert spark_view_sql("SELECT region, count(*) FROM s.sales GROUP BY region", "shop", time=1765000000.25) == (
        "SELECT region, COUNT(*) FROM shop.s.sales TIMESTAMP AS OF '2025-12-06T05:46:40.250000Z' GROUP BY region")
