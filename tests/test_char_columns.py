"""Issue 26: fixed-length strings. A Postgres `char(n)` column is CHAR(n) to Spark, so comparisons
with it answer as Spark's CHAR(n) does — the shorter side padded with spaces — on the replica route
and on the source route, and equal Spark's own JDBC source over the same table (which reads it
as CHAR(n) too). Before, the catalog exposed a STRING holding the padding, and `c = 'Monday'` on
a `char(9)` matched nothing."""

from __future__ import annotations

import pytest

from conftest import PG_JDBC_JAR, normalized
from services import pg_dsn

QUERIES = [
    "SELECT id FROM {t} WHERE c = 'Monday'",
    "SELECT id FROM {t} WHERE c IN ('Monday', 'Tue', 'nothing')",
    "SELECT id FROM {t} WHERE c = 'Monday   '",
    "SELECT id FROM {t} WHERE c <> 'ab'",
    "SELECT id FROM {t} WHERE c > 'Mon' AND c < 'Tuesday'",
    "SELECT id, c, length(c), concat(c, '|') FROM {t}",
    "SELECT c, count(*) FROM {t} GROUP BY c",
    "SELECT a.id, b.id FROM {t} a JOIN {t} b ON a.c = b.v",
    "SELECT id FROM {t} WHERE c = v",
    "SELECT id FROM {t} WHERE EXISTS (SELECT 1 FROM {t} x WHERE x.c = 'Tue' AND x.id <> {t_alias}.id)",
]


@pytest.fixture
def chars(workspace):
    ws = workspace
    t = f"{ws.schema}.days"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, c char(9), v varchar(12))")
    ws.sql(f"INSERT INTO {t} VALUES (1, 'Monday', 'Monday'), (2, 'Tue', 'Tue '), (3, NULL, 'x'), (4, 'Sunday   ', 'Sunday'),"
           " (5, 'ab', 'ab'), (6, '', ''), (7, 'Monday', 'Tue')")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("days")
    return t


def jdbc_view(spark, table: str) -> str:
    """Spark's own JDBC source over the same Postgres table, as a temporary view."""
    assert PG_JDBC_JAR.exists(), f"{PG_JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java (.ci/install.sh does)"
    params = dict(p.split("=", 1) for p in pg_dsn().split())
    url = f"jdbc:postgresql://{params.get('host', '127.0.0.1')}:{params.get('port', '5432')}/{params.get('dbname', 'postgres')}"
    (spark.read.format("jdbc").option("url", url).option("dbtable", table).option("user", params.get("user", "postgres"))
     .option("driver", "org.postgresql.Driver").load().createOrReplaceTempView("jdbc_days"))
    return "jdbc_days"


def run(spark, text: str, table: str) -> list:
    alias = table.split(".")[-1]
    return normalized(spark.sql(text.format(t=table, t_alias=alias)).collect())


@pytest.mark.parametrize("route", ["replica", "source"])
def test_char_columns_answer_as_sparks_jdbc_source(workspace, spark, catalog, chars, route):
    ws = workspace
    if route == "source":
        ws.htap("failover", chars, "on")
    ours = f"{catalog}.{chars}"
    assert spark.table(ours).schema["c"].metadata.get("__CHAR_VARCHAR_TYPE_STRING") == "char(9)"
    theirs = jdbc_view(spark, chars)
    assert spark.table(theirs).schema["c"].metadata.get("__CHAR_VARCHAR_TYPE_STRING") == "char(9)"
    monday = run(spark, QUERIES[0], ours)
    assert monday == [(1,), (7,)], monday  # before: no row
    for text in QUERIES:
        assert run(spark, text, ours) == run(spark, text, theirs), text
    with ws.store() as store:
        assert store.recent_scans(ws.table("days").id, 1)[0].route == route
