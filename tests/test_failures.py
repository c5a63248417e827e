"""Issue 11: one table can never stall its source. A value the replica cannot hold fails only its
table — named with the column, the value and the seq in `htap status`, the system tables and the
log; its reads fail over to the source; the rest of the source keeps streaming and the slot
keeps advancing; the table is copied again after a fix (a command, or a type change)."""

from __future__ import annotations

import json
import re

from htap.seq import lsn_to_int

from conftest import normalized, wait_until


def confirmed_lsn(ws) -> int:
    (row,) = ws.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (f"htap_{ws.source}",))
    return lsn_to_int(row[0])


def wait_failed(ws, name: str):
    return wait_until(lambda: (t := ws.table(name)).state == "failed" and t, None, f"{name} to fail")


def test_poison_in_the_stream_fails_only_its_table(workspace, spark, catalog):
    ws = workspace
    a, b = f"{ws.schema}.a", f"{ws.schema}.b"
    ws.sql(f"CREATE TABLE {a} (id int PRIMARY KEY, v int[])")
    ws.sql(f"CREATE TABLE {b} (id int PRIMARY KEY, n int)")
    ws.sql(f"INSERT INTO {a} SELECT g, ARRAY[g, g + 1] FROM generate_series(1, 50) g")
    ws.sql(f"INSERT INTO {b} SELECT g, g FROM generate_series(1, 50) g")
    ws.htap("tables", "add", a)
    ws.htap("tables", "add", b)
    ws.start_service()
    ws.wait_readable("a")
    ws.wait_readable("b")

    # One transaction: a two-dimensional array for `a` (Spark ARRAY<INT> here is 1-D) and a change of `b`.
    with ws.pg.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"UPDATE {b} SET n = -n WHERE id <= 10")
        cur.execute(f"INSERT INTO {a} VALUES (1000, '{{{{1,2}},{{3,4}}}}')")
        cur.execute("COMMIT")
    poison_lsn = ws.source_seq()
    failed = wait_failed(ws, "a")
    assert "column v" in failed.error and "{{1,2},{3,4}}" in failed.error and "multi-dimensional" in failed.error
    assert f"source {ws.source}, table {a}" in failed.error
    seq = re.search(r"at seq ([0-9A-F]+/[0-9A-F]+)", failed.error)
    assert seq and lsn_to_int(seq.group(1)) <= poison_lsn + 1  # the LSN of the commit that carried it
    assert f"htap tables recopy {a} --column-type v=" in failed.error

    # The same transaction's change of `b` was applied, and `b` keeps following its source.
    ws.wait_caught_up("b")
    assert normalized(spark.sql(f"SELECT * FROM {catalog}.{b}").collect()) == normalized(ws.sql(f"SELECT * FROM {b}"))
    confirmed = confirmed_lsn(ws)
    ws.sql(f"INSERT INTO {b} SELECT g, g FROM generate_series(51, 80) g")
    ws.sql(f"INSERT INTO {a} VALUES (1001, ARRAY[7])")  # `a` is not followed any more
    ws.wait_caught_up("b")
    wait_until(lambda: confirmed_lsn(ws) > confirmed, None, "the slot's confirmed_flush_lsn to move on")
    assert ws.table("b").state == "streaming"

    # Visible everywhere: status (text and JSON), the system table, the log.
    text = ws.htap("status").stdout
    assert "1 failed" in text and "{{1,2},{3,4}}" in text and f"slot htap_{ws.source}" in text
    status = json.loads(ws.htap("status", "--json").stdout)
    (src,) = [s for s in status["sources"] if s["source"] == ws.source]
    assert src["failed"] == 1 and src["retained_bytes"] is not None
    (row,) = spark.sql(f"SELECT state, error FROM {catalog}.htap.tables WHERE table_name = 'a'").collect()
    assert row.state == "failed" and "{{1,2},{3,4}}" in row.error
    assert "{{1,2},{3,4}}" in ws.log() and f"table {a}" in ws.log()

    # Reads of `a` fail over to the source (the poison row itself cannot be an ARRAY<INT> there either).
    ids = spark.sql(f"SELECT id FROM {catalog}.{a} WHERE id < 1000").collect()
    assert sorted(r.id for r in ids) == list(range(1, 51))
    store = ws.store()
    assert store.recent_scans(ws.table("a").id, 1)[0].route == "source"
    store.close()

    # The fix: keep the array's text. The table is copied again and follows changes again.
    ws.htap("tables", "recopy", a, "--column-type", "v=string")
    wait_until(lambda: ws.table("a").readable, None, "a to be copied again")
    ws.sql(f"UPDATE {a} SET v = '{{{{5}},{{6}}}}' WHERE id = 1")
    ws.wait_caught_up("a")
    assert ws.table("a").state == "streaming"
    got = normalized(spark.sql(f"SELECT id, v FROM {catalog}.{a}").collect())
    assert got == normalized(ws.sql(f"SELECT id, v::text FROM {a}"))


def test_poison_in_the_initial_copy_fails_once_and_a_type_change_recovers(workspace, spark, catalog):
    ws = workspace
    c, d = f"{ws.schema}.c", f"{ws.schema}.d"
    ws.sql(f"CREATE TABLE {c} (id int PRIMARY KEY, x numeric)")
    ws.sql(f"CREATE TABLE {d} (id int PRIMARY KEY)")
    ws.sql(f"INSERT INTO {c} VALUES (1, 1.25), (2, 123456789012.5), (3, NULL)")
    # Unconstrained numeric has no replica type that holds all its values: refused, naming the way out.
    r = ws.htap("tables", "add", c, check=False)
    assert r.returncode == 2 and "column x" in r.stderr and "--column-type x=" in r.stderr
    ws.htap("tables", "add", c, "--column-type", "x=decimal(10,2)")  # too narrow for row 2
    ws.htap("tables", "add", d)
    ws.start_service()
    failed = wait_failed(ws, "c")
    assert "initial copy" in failed.error and "column x" in failed.error and "123456789012.5" in failed.error

    # The source goes on: `d` is copied and streams; `c` is not retried in a loop.
    ws.wait_readable("d")
    for i in range(3):
        ws.sql(f"INSERT INTO {d} VALUES ({i})")
        ws.wait_caught_up("d")
    assert ws.table("c").state == "failed"
    assert ws.log().count("123456789012.5") == 1

    # Fixing the column's type in the source copies the table again by itself.
    ws.sql(f"ALTER TABLE {c} ALTER COLUMN x TYPE numeric(20,2)")
    wait_until(lambda: ws.table("c").readable, None, "c to be copied again after the type change")
    assert [col.override for col in ws.table("c").columns] == [None, None]
    ws.sql(f"INSERT INTO {c} VALUES (4, 'NaN')")  # numeric(p,s) NaN: NULL in the replica
    ws.wait_caught_up("c")
    got = normalized(spark.sql(f"SELECT * FROM {catalog}.{c}").collect())
    assert got == normalized(ws.sql(f"SELECT id, NULLIF(x, 'NaN') FROM {c}"))


def test_poison_in_the_stream_of_an_overridden_column(workspace):
    ws = workspace
    e = f"{ws.schema}.e"
    ws.sql(f"CREATE TABLE {e} (id int PRIMARY KEY, x numeric)")
    ws.sql(f"INSERT INTO {e} VALUES (1, 1.5)")
    ws.htap("tables", "add", e, "--column-type", "x=decimal(6,1)")
    ws.start_service()
    ws.wait_readable("e")
    ws.sql(f"INSERT INTO {e} VALUES (2, 0.25)")  # needs a second decimal: does not fit decimal(6,1)
    failed = wait_failed(ws, "e")
    assert "change stream" in failed.error and "column x" in failed.error and "'0.25'" in failed.error
