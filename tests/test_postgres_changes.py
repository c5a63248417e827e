"""Issue 4 (Postgres): partial updates of unchanged TOAST values, TRUNCATE, key updates, NULLs."""

from __future__ import annotations

from conftest import normalized


def spark_rows(spark, catalog, table, columns="*"):
    return normalized(spark.sql(f"SELECT {columns} FROM {catalog}.{table}").collect())


def toasted_table(ws, name: str, rows: int, md5s: int) -> tuple[str, str]:
    """Table `name` (id, big text stored out of line, small) with `rows` rows; returns its name and
    the query of a big value (`{seed}` to fill in), for later updates."""
    t = f"{ws.schema}.{name}"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, big text, small int)")
    ws.sql(f"ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL")  # no compression: always out of line
    big = f"SELECT string_agg(md5(g::text || {{seed}}), '') FROM generate_series(1, {md5s}) g"
    ws.sql(f"INSERT INTO {t} SELECT i, ({big.format(seed='i')}), i FROM generate_series(1, {rows}) i")
    return t, big


def test_unchanged_toast_values_are_filled_from_older_versions(workspace, spark, catalog):
    ws = workspace
    t, big = toasted_table(ws, "docs", rows=20, md5s=400)
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("docs")

    # Streamed rows first (the copy is full rows), then updates that leave `big` untouched.
    ws.sql(f"INSERT INTO {t} SELECT i, ({big.format(seed='i')}), i FROM generate_series(21, 30) i")
    ws.wait_caught_up("docs")
    ws.sql(f"UPDATE {t} SET small = small + 100 WHERE id % 2 = 0")
    ws.sql(f"BEGIN; UPDATE {t} SET big = 'changed' || id, small = 0 WHERE id = 3; UPDATE {t} SET small = 1 WHERE id = 3; COMMIT")
    ws.sql(f"UPDATE {t} SET small = small + 1 WHERE id > 20")
    ws.wait_caught_up("docs")

    from htap.replica.metadata import MetadataStore

    store: MetadataStore = ws.store()
    partial = sum(d.partial_rows for d in store.deltas(ws.table("docs").id))
    store.close()
    # Partial updates are completed when written (the deltas hold full rows, so reads never fill).
    assert "partial updates completed at write time" in ws.log(), (
        "the source sent no unchanged-TOAST values; the test does not exercise partial rows")
    assert partial == 0
    assert spark_rows(spark, catalog, t) == normalized(ws.sql(f"SELECT * FROM {t}"))
    # A filter on the filled column sees the filled value.
    got = spark.sql(f"SELECT id FROM {catalog}.{t} WHERE big LIKE 'changed%' OR length(big) > 1000").collect()
    assert normalized(got) == normalized(ws.sql(f"SELECT id FROM {t} WHERE big LIKE 'changed%' OR length(big) > 1000"))


def test_truncate_hides_older_rows_and_keeps_rows_written_after_it(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.events"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 100) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("events")
    ws.sql(f"INSERT INTO {t} VALUES (101, 'x')")
    ws.sql(f"BEGIN; INSERT INTO {t} VALUES (102, 'y'); TRUNCATE {t}; INSERT INTO {t} VALUES (5, 'after'); COMMIT")
    ws.wait_caught_up("events")
    assert spark_rows(spark, catalog, t) == [(5, "after")]
    ws.sql(f"INSERT INTO {t} VALUES (6, 'later')")
    ws.sql(f"TRUNCATE {t}")
    ws.sql(f"INSERT INTO {t} VALUES (7, 'last')")
    ws.wait_caught_up("events")
    assert spark_rows(spark, catalog, t) == [(7, "last")]
    assert spark.sql(f"SELECT count(*) FROM {catalog}.{t}").collect()[0][0] == 1


def test_composite_key_and_key_updates(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.lines"
    ws.sql(f"CREATE TABLE {t} (order_id int, line int, qty int, PRIMARY KEY (order_id, line))")
    ws.sql(f"INSERT INTO {t} SELECT g / 10, g % 10, g FROM generate_series(0, 199) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("lines")
    ws.sql(f"UPDATE {t} SET line = line + 100 WHERE order_id = 3")
    ws.sql(f"UPDATE {t} SET order_id = 999, qty = NULL WHERE order_id = 4 AND line = 2")
    ws.sql(f"DELETE FROM {t} WHERE order_id = 5")
    ws.sql(f"INSERT INTO {t} VALUES (5, 0, 1)")
    ws.wait_caught_up("lines")
    assert spark_rows(spark, catalog, t) == normalized(ws.sql(f"SELECT * FROM {t}"))
    got = spark.sql(f"SELECT order_id, count(*), sum(qty) FROM {catalog}.{t} WHERE order_id IN (3, 4, 5, 999) GROUP BY order_id").collect()
    want = ws.sql(f"SELECT order_id, count(*), sum(qty) FROM {t} WHERE order_id IN (3, 4, 5, 999) GROUP BY order_id")
    assert normalized(got) == normalized(want)


def test_key_changes_keep_unchanged_toast_values_from_the_old_key(workspace, spark, catalog):
    """An UPDATE of the key leaves an out-of-line value unchanged TOAST in the new row (the old
    tuple carries only the key): the replica takes it from the old key's version — buffered in
    the same transaction, or in a delta (the copy's, a streamed one) of another partition."""
    from conftest import tune

    ws = workspace
    t, big = toasted_table(ws, "moved", rows=60, md5s=100)
    tune(ws, partition_rows=15, compaction_interval_s=0.0)  # four partitions; keys + 1000 land in the last
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("moved")
    parts = ws.table("moved").layout.ids
    assert len(parts) > 1

    # Old key only in the copy's delta.
    ws.sql(f"UPDATE {t} SET id = id + 1000 WHERE id <= 5")
    # Old key in a streamed delta (a partial update of its own), then moved.
    ws.sql(f"UPDATE {t} SET small = small + 100 WHERE id BETWEEN 16 AND 20")
    ws.wait_caught_up("moved")
    ws.sql(f"UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 16 AND 20")
    # One transaction: partial update, key change, key change again (the old key buffered), and a
    # row inserted and moved before any checkpoint.
    ws.sql(f"BEGIN; UPDATE {t} SET small = -small WHERE id BETWEEN 31 AND 35;"
           f" UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 31 AND 35;"
           f" UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 1031 AND 1033;"
           f" INSERT INTO {t} SELECT 70, ({big.format(seed='70')}), 70;"
           f" UPDATE {t} SET id = 3070 WHERE id = 70; COMMIT")
    # A moved row moved again after its moved version was written.
    ws.wait_caught_up("moved")
    ws.sql(f"UPDATE {t} SET id = id + 5000 WHERE id IN (1001, 1016, 2031)")
    ws.wait_caught_up("moved")

    assert "key-changing partial updates completed from their old keys" in ws.log(), (
        "the source sent no unchanged-TOAST values with a key change; the test does not exercise them")
    assert spark_rows(spark, catalog, t) == normalized(ws.sql(f"SELECT * FROM {t}"))
    nulls = spark.sql(f"SELECT count(*) FROM {catalog}.{t} WHERE big IS NULL").collect()[0][0]
    assert nulls == 0
    assert ws.table("moved").state != "failed"
    assert "Traceback" not in ws.log()
