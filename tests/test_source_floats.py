"""Floating point arithmetic on a failed-over table answers as Spark does. Postgres raises where
a DOUBLE product, sum or quotient leaves DOUBLE's range (`value out of range: overflow`, or
`underflow` for a nonzero product that rounds to 0) and Spark gives ±Infinity or 0: such a plan
is computed by DuckDB over the source's rows (htap.pushdown.source_reader), and every query here
returns on the source route what it returns on the replica route and what Spark alone returns over
the same rows. Values are chosen so that no sum depends on the order of its terms, and no divisor
is zero (an error in Spark's ANSI mode)."""

from __future__ import annotations

import math

from htap.rewrite.dialects import plan_computes_floats
from htap.rewrite.pushed import PushedPlan

from conftest import normalized

ROWS = [
    (1, 1e308, 10.0, 1e-10, 1), (2, -1e308, 1e308, 1e-10, 1), (3, 1e-300, 1e-300, 3.0, 2), (4, 5e-324, 0.5, -1.0, 2),
    (5, 0.1, 0.2, 0.3, 3), (6, -0.0, 2.0, 1.5, 3), (7, float("nan"), 1.0, 2.0, 4), (8, float("inf"), -1.0, 0.0, 4),
    (9, None, 1.0, None, 5), (10, 1.5e-200, -2e-200, 4.0, 5), (11, 3.0, 4.0, 7.0, 6), (12, 1.7976931348623157e308, 2.0, 0.5, 6),
]
# (query, whether its arithmetic is pushed from Postgres, from MariaDB): a plain projection of a
# scan stays in Spark; a join's aggregate is pushed with the join from Postgres (one subtree).
QUERIES = [
    ("SELECT id, a * b, a + b, a - b, a / b, (a * c) * c, a * b * c FROM {t}", False, False),
    ("SELECT g, sum(a * b), sum(c), count(*) FROM {t} GROUP BY g", True, True),
    ("SELECT id FROM {t} WHERE a * b > 1 OR a * b < -1", True, True),
    ("SELECT sum(b * c), max(a * c) FROM {t} WHERE g IN (1, 3, 6)", True, True),
    # ANSI division (DIV) of doubles in a correlated EXISTS, one tree from Postgres: computed over
    # the source's rows too (Postgres raised an underflow: fuzz seed 22 query 1404)
    ("SELECT id FROM {t} x WHERE EXISTS (SELECT 1 FROM {t} y WHERE y.g <> x.g AND y.a / y.b <= 1e-100)", True, False),
    # two DISTINCT aggregates beside an AVG (Spark's Expand): DuckDB scans the one scan's rows
    # twice, so they cannot be a stream (fuzz seed 21 query 1)
    ("SELECT g, avg(id), count(DISTINCT id), sum(DISTINCT c) FROM {t} GROUP BY g", True, True),
    ("SELECT x.g, sum(x.a * y.b), max(x.c / y.b), count(*) FROM {t} x JOIN {t} y ON x.id = y.id + 1 GROUP BY x.g",
     True, False),
    ("SELECT x.id, x.a * y.b, x.c / y.b FROM {t} x JOIN {t} y ON x.id = y.id + 1", False, False),
    # Three scans of different columns (one statement, a UNION ALL whose slots each only one
    # branch fills: typed NULLs, or Postgres cannot match text with integer; CI's fuzzer seed 113).
    ("SELECT x.g, sum(x.a * y.b), count(z.id), max(z.g) FROM {t} x JOIN {t} y ON x.id = y.id + 1"
     " JOIN {t} z ON z.id = y.g GROUP BY x.g", True, True),
]


def as_text(rows) -> list[tuple]:
    """Rows with every float as its repr (NaN equal to NaN, -0.0 told from 0.0)."""
    return [tuple(repr(v) if isinstance(v, float) else v for v in r) for r in normalized(rows)]


def create(ws, spark, table: str, rows: list[tuple], double: str, literal) -> str:
    """The table on the source (replicated) and a view of the same rows Spark alone reads."""
    ws.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, a {double}, b {double}, c {double}, g int)")
    ws.sql(f"INSERT INTO {table} VALUES " + ", ".join(
        "(" + ", ".join("NULL" if v is None else literal(v) if isinstance(v, float) else str(v) for v in row) + ")"
        for row in rows))
    ws.htap("tables", "add", table)
    ws.start_service()
    ws.wait_readable(table.split(".")[1])
    view = "spark_alone_floats"
    spark.createDataFrame(rows, "id int, a double, b double, c double, g int").createOrReplaceTempView(view)
    return view


def check_both_routes(ws, spark, catalog: str, table: str, view: str, mariadb: bool) -> None:
    name = table.split(".")[1]
    for q, *pushed_from in QUERIES:
        pushed = pushed_from[mariadb]
        alone = as_text(spark.sql(q.format(t=view)).collect())
        replica = as_text(spark.sql(q.format(t=f"{catalog}.{table}")).collect())
        ws.htap("failover", table, "on")
        try:
            source = as_text(spark.sql(q.format(t=f"{catalog}.{table}")).collect())
            store = ws.store()
            try:
                scan = store.recent_scans(ws.table(name).id, 1)[0]
            finally:
                store.close()
        finally:
            ws.htap("failover", table, "off")
        assert scan.route == "source", (q, scan)
        assert plan_computes_floats(PushedPlan.from_dict(scan.pushed)) == pushed, (q, scan.pushed)
        assert source == replica == alone, q


def test_postgres_float_arithmetic_out_of_range_answers_as_spark_on_the_source_route(workspace, spark, catalog):
    assert any(math.isinf(a * b) for _, a, b, _c, _g in ROWS if a is not None)  # Postgres would raise
    table = f"{workspace.schema}.floats"
    view = create(workspace, spark, table, ROWS, "double precision", lambda v: f"'{v!r}'::float8")
    check_both_routes(workspace, spark, catalog, table, view, mariadb=False)


def test_mariadb_float_arithmetic_out_of_range_answers_as_spark_on_the_source_route(my_workspace, spark, my_catalog):
    """MariaDB's DOUBLE holds no NaN, infinity or -0.0: the finite rows (its overflow raises too)."""
    rows = [r for r in ROWS if not any(isinstance(v, float) and (not math.isfinite(v) or repr(v) == "-0.0") for v in r)]
    table = f"{my_workspace.schema}.floats"
    view = create(my_workspace, spark, table, rows, "double", repr)
    check_both_routes(my_workspace, spark, my_catalog, table, view, mariadb=True)
