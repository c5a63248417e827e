"""Issue 15 item 7: `access.mode = "login"` — every read logs in to the source as a role.

Real roles in the private Postgres (members of services.PASSWORD_GROUP log in with a password)
and the private MariaDB: a read without credentials, with a wrong password or as a role
without the privileges is refused with a message saying what to set, never showing the password.
"""

from __future__ import annotations

import uuid

import psycopg2
import pytest

from conftest import normalized, wait_until
from services import PASSWORD_GROUP, SERVICES

SECRET = "pa55-" + uuid.uuid4().hex[:8]
WRONG = "wrong-" + uuid.uuid4().hex[:8]


def login_mode(ws) -> None:
    """Uncomment `mode` in the [access] section `htap init` wrote, as "login"."""
    text = ws.config.read_text()
    assert '# mode = "declared"' in text
    ws.config.write_text(text.replace('# mode = "declared"', 'mode = "login"', 1))


def catalog(spark, ws, name: str, **options: str) -> str:
    cat = f"{name}_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{cat}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{cat}.config", str(ws.config))
    for key, value in options.items():
        spark.conf.set(f"spark.sql.catalog.{cat}.{key}", value)
    return cat


def refused(spark, query: str, match: str) -> str:
    with pytest.raises(Exception, match=match) as e:
        spark.sql(query).collect()
    text = str(e.value)
    assert SECRET not in text and WRONG not in text
    return text


def test_postgres_reads_log_in_as_a_source_role(workspace, spark, tmp_path):
    ws = workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region text, secret text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'r' || (g % 3), 's' || g FROM generate_series(1, 100) g")
    ws.htap("tables", "add", t)
    login_mode(ws)
    ws.start_service()
    ws.wait_readable("orders")
    alice, bob = f"alice_{ws.source}", f"bob_{ws.source}"
    for role in (alice, bob):
        ws.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET}' IN ROLE {PASSWORD_GROUP}")
    try:
        ws.sql(f"GRANT USAGE ON SCHEMA {ws.schema} TO {alice}, {bob}")
        ws.sql(f"GRANT SELECT (id, region) ON {t} TO {alice}")
        # The server checks these roles' passwords (else the refusals below prove nothing).
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(SERVICES.postgres.dsn, user=alice, password=WRONG).close()

        anonymous = catalog(spark, ws, "anon")
        text = refused(spark, f"SELECT id FROM {anonymous}.{t}", "HTAP_PERMISSION_DENIED")
        assert 'access.mode = "login"' in text and "spark.sql.catalog.<catalog>.user" in text and ".password" in text
        refused(spark, f"SELECT * FROM {anonymous}.htap.tables", "requires every read to log in")
        no_password = catalog(spark, ws, "nopw", user=alice)
        refused(spark, f"SELECT id FROM {no_password}.{t}", "has no password")
        wrong = catalog(spark, ws, "wrong", user=alice, password=WRONG)
        refused(spark, f"SELECT id FROM {wrong}.{t}", rf"{alice}.*cannot log in.*password authentication failed")

        good = catalog(spark, ws, "good", user=alice, password=SECRET)
        q = f"SELECT id, region FROM {good}.{t} WHERE id < 10"
        assert normalized(spark.sql(q).collect()) == normalized(ws.sql(f"SELECT id, region FROM {t} WHERE id < 10"))
        refused(spark, f"SELECT id, secret FROM {good}.{t}", rf"HTAP_PERMISSION_DENIED.*{alice}.*secret")
        plan = "\n".join(r[0] for r in spark.sql(f"EXPLAIN EXTENDED {q}").collect())
        assert "HtapScan" in plan and SECRET not in plan
        assert spark.sql(f"SELECT count(*) FROM {good}.htap.tables").collect()[0][0] == 1

        secret_file = tmp_path / "pw"
        secret_file.write_text(SECRET + "\n")
        from_file = catalog(spark, ws, "file", user=alice, password_file=str(secret_file))
        assert spark.sql(f"SELECT count(id) FROM {from_file}.{t}").collect()[0][0] == 100
        # A derived view reads as its table's columns: alice may read counts by region, not
        # what the view aggregates of `secret`.
        ws.htap("views", "create", "by_region", "--sql", f"SELECT region, count(*) AS n FROM {t} GROUP BY region")
        ws.htap("views", "create", "secrets", "--sql", f"SELECT region, max(secret) AS s FROM {t} GROUP BY region")

        def built() -> bool:
            with ws.store() as store:
                return all(store.get_view(ws.source, v).table.readable for v in ("by_region", "secrets"))

        wait_until(built, None, "the views to be built")
        q = f"SELECT region, n FROM {good}.views.by_region"
        assert f"{good}.views.by_region" in spark.sql(q)._jdf.queryExecution().executedPlan().toString()
        assert sorted(spark.sql(q).collect()) == sorted(ws.sql(f"SELECT region, count(*) FROM {t} GROUP BY region"))
        refused(spark, f"SELECT * FROM {good}.views.secrets", rf"HTAP_PERMISSION_DENIED.*{alice}.*secret")
        # A real login as a role that lacks the privileges: its privileges decide, as before.
        as_bob = catalog(spark, ws, "bob", user=bob, password=SECRET)
        refused(spark, f"SELECT id FROM {as_bob}.{t}", rf"HTAP_PERMISSION_DENIED.*{bob}' lacks SELECT")
    finally:
        for role in (alice, bob):
            ws.sql(f"DROP OWNED BY {role}")
            ws.sql(f"DROP ROLE {role}")


def test_mariadb_reads_log_in_as_a_source_account(my_workspace, spark, tmp_path):
    ws = my_workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region varchar(10), secret varchar(10))")
    ws.sql(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, 'r{i % 3}', 's{i}')" for i in range(1, 101)))
    ws.htap("tables", "add", t)
    login_mode(ws)
    ws.start_service()
    ws.wait_readable("orders")
    carol = f"carol_{ws.source}"[:32]
    ws.sql(f"CREATE USER '{carol}'@'%' IDENTIFIED BY '{SECRET}'")
    try:
        ws.sql(f"GRANT SELECT (id, region) ON {t} TO '{carol}'@'%'")
        refused(spark, f"SELECT id FROM {catalog(spark, ws, 'anon')}.{t}", "requires every read to log in")
        wrong = catalog(spark, ws, "wrong", user=carol, password=WRONG)
        refused(spark, f"SELECT id FROM {wrong}.{t}", rf"{carol}.*cannot log in.*Access denied")
        good = catalog(spark, ws, "good", user=carol, password=SECRET)
        q = f"SELECT id, region FROM {good}.{t} WHERE id < 10"
        assert normalized(spark.sql(q).collect()) == normalized(ws.sql(f"SELECT id, region FROM {t} WHERE id < 10"))
        refused(spark, f"SELECT id, secret FROM {good}.{t}", rf"HTAP_PERMISSION_DENIED.*{carol}.*secret")
        # The grants of the account the server authenticated decide ('carol'@'%').
        ws.sql(f"GRANT SELECT ON {t} TO '{carol}'@'%'")
        assert spark.sql(f"SELECT count(secret) FROM {good}.{t}").collect()[0][0] == 100
    finally:
        ws.sql(f"DROP USER IF EXISTS '{carol}'@'%'")
