"""Read-your-writes (issue 28 item 1): `spark.htap.readAfter = now | <seq>` makes a query read a
replica that covers the source's position when the query is planned (`now`: Postgres'
`pg_current_wal_lsn()`, MySQL/MariaDB's binlog end), waiting for it up to
`spark.htap.readAfterTimeoutSeconds`; past that, a `route=replica` catalog fails with how far behind
the replica is, and `auto` reads the source. The routing record says what was asked and how long
planning waited, EXPLAIN what will be asked."""

from __future__ import annotations

import pytest

READ_AFTER = "spark.htap.readAfter"
TIMEOUT = "spark.htap.readAfterTimeoutSeconds"


def last_scan(ws, table: str):
    with ws.store() as store:
        return store.recent_scans(ws.table(table).id, 1)[0]


def other_catalog(spark, ws, name: str, **options: str) -> str:
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.config", str(ws.config))
    for key, value in options.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
    return name


def writes_then_reads(ws, spark, table: str, ref: str, rounds) -> None:
    """Each round a write, then at once a query that must see it (readAfter = now is set)."""
    for i in rounds:
        ws.sql(f"INSERT INTO {table} VALUES ({i}, 'written {i}')")
        ws.sql(f"UPDATE {table} SET body = 'changed {i}' WHERE id = 1")
        rows = spark.sql(f"SELECT id, body FROM {ref} WHERE id IN (1, {i}) ORDER BY id").collect()
        assert [tuple(r) for r in rows] == [(1, f"changed {i}"), (i, f"written {i}")]
        scan = last_scan(ws, "notes")
        assert scan.route == "replica" and "read after seq" in scan.reason and "(now)" in scan.reason, scan


@pytest.fixture
def notes(workspace):
    ws = workspace
    t = f"{ws.schema}.notes"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, body text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'n' || g FROM generate_series(1, 10) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("notes")
    return t


def test_a_query_with_read_after_now_sees_the_write_committed_just_before(workspace, spark, catalog, notes):
    ws = workspace
    spark.conf.set(READ_AFTER, "now")
    try:
        plan = spark.sql(f"EXPLAIN SELECT count(*) FROM {catalog}.{notes}").collect()[0][0]
        assert "readAfter=now (planning waits until the replica covers that source position)" in plan, plan
        writes_then_reads(ws, spark, notes, f"{catalog}.{notes}", range(100, 106))
        # A given seq at or below the replica's: no wait beyond a look at the metadata.
        seq = ws.table("notes").max_safe_seq
        spark.conf.set(READ_AFTER, str(seq))
        assert spark.sql(f"SELECT count(*) FROM {catalog}.{notes}").collect()[0][0] == 16
        assert f"read after seq {seq} (a seq)" in last_scan(ws, "notes").reason
    finally:
        spark.conf.unset(READ_AFTER)


def test_read_after_now_on_mariadb_sees_the_write_committed_just_before(my_workspace, spark, my_catalog):
    """MariaDB: `now` is the binlog's end (the newest commit event's end, which is its seq)."""
    ws = my_workspace
    t = f"{ws.schema}.notes"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, body varchar(40)) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t} SELECT seq, concat('n', seq) FROM seq_1_to_10")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("notes")
    spark.conf.set(READ_AFTER, "now")
    try:
        writes_then_reads(ws, spark, t, f"{my_catalog}.{t}", range(100, 104))
    finally:
        spark.conf.unset(READ_AFTER)


def test_a_position_the_replica_does_not_reach_fails_on_replica_and_reads_the_source_on_auto(
    workspace, spark, catalog, notes
):
    ws = workspace
    far = ws.table("notes").max_safe_seq + 10**15  # no write will get there
    strict = other_catalog(spark, ws, f"{catalog}_strict", route="replica")
    spark.conf.set(READ_AFTER, str(far))
    spark.conf.set(TIMEOUT, "0.3")
    try:
        with pytest.raises(Exception, match=r"behind the seq the query must read after.*readAfterTimeoutSeconds = 0.3"):
            spark.sql(f"SELECT count(*) FROM {strict}.{notes}").collect()
        # auto: the source answers, now (every table of the source in the query from there).
        ws.sql(f"INSERT INTO {notes} VALUES (500, 'late')")
        assert spark.sql(f"SELECT count(*) FROM {catalog}.{notes}").collect()[0][0] == 11
        scan = last_scan(ws, "notes")
        assert scan.route == "source" and "behind the seq the query must read after" in scan.reason, scan
    finally:
        spark.conf.unset(READ_AFTER)
        spark.conf.unset(TIMEOUT)


def test_bad_read_after_values_are_errors_that_say_what_to_give(workspace, spark, catalog, notes):
    spark.conf.set(READ_AFTER, "soon")
    try:
        with pytest.raises(Exception, match=r"readAfter = 'soon': use `now` or a seq"):
            spark.sql(f"SELECT count(*) FROM {catalog}.{notes}").collect()
    finally:
        spark.conf.unset(READ_AFTER)
    bad = other_catalog(spark, workspace, f"{catalog}_bad", read_after_timeout_s="-1")
    with pytest.raises(Exception, match=r"read_after_timeout_s.*give a number of seconds"):
        spark.sql(f"SELECT count(*) FROM {bad}.{notes}").collect()
