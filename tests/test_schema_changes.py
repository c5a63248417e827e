"""Issues 3 and 4: ALTER TABLE in mid-stream. Adding and dropping columns changes only the
logical schema (old deltas are read under the new one, and compacted into it); other changes
(a default for existing rows, a rename, a type change) have the table copied again. Either way
Spark returns what the source returns."""

from __future__ import annotations

from conftest import normalized, tune, wait_until


def same(ws, spark, catalog, t):
    return normalized(spark.sql(f"SELECT * FROM {catalog}.{t}").collect()) == normalized(ws.sql(f"SELECT * FROM {t}"))


def test_add_and_drop_columns_are_metadata_only(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.items"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, a text, b int)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'a' || g, g FROM generate_series(1, 100) g")
    ws.htap("tables", "add", t)
    # The test compacts below, from this process: no second compactor in the service, whose
    # garbage collection could delete a delta this one is merging (one compactor per store).
    tune(ws, compaction_interval_s=0.0)
    ws.start_service()
    ws.wait_readable("items")

    ws.sql(f"ALTER TABLE {t} ADD COLUMN c numeric(8,2)")
    ws.sql(f"UPDATE {t} SET c = id * 0.5 WHERE id % 3 = 0")
    ws.sql(f"INSERT INTO {t} VALUES (1000, 'new', 1, 9.75)")
    ws.wait_caught_up("items")
    table = ws.table("items")
    assert table.schema_version == 2 and table.state == "streaming"
    assert same(ws, spark, catalog, t)
    assert normalized(spark.sql(f"SELECT count(c), sum(c) FROM {catalog}.{t}").collect()) == normalized(
        ws.sql(f"SELECT count(c), sum(c) FROM {t}")
    )

    ws.sql(f"ALTER TABLE {t} DROP COLUMN a")
    ws.sql(f"UPDATE {t} SET b = -b WHERE id < 10")
    ws.sql(f"DELETE FROM {t} WHERE id = 50")
    ws.wait_caught_up("items")
    assert ws.table("items").schema_version == 3
    assert [f.name for f in spark.table(f"{catalog}.{t}").schema.fields] == ["id", "b", "c"]
    assert same(ws, spark, catalog, t)

    # Compaction folds deltas of all three schema versions into the current one.
    from htap.conf import load_config
    from htap.replica.compaction import Policy, compact_table

    cfg = load_config(ws.config)
    store = ws.store()
    while compact_table(cfg, store, ws.table("items"), Policy(min_bytes=1 << 40, ratio=2, max_deltas=1)):
        pass
    assert {d.schema_version for d in store.deltas(ws.table("items").id)} == {3}
    store.close()
    assert same(ws, spark, catalog, t)


def test_changes_the_replica_cannot_follow_in_place_recopy_the_table(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.things"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
    ws.sql(f"INSERT INTO {t} SELECT g, g FROM generate_series(1, 50) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("things")

    for alter in (
        f"ALTER TABLE {t} ADD COLUMN flag boolean NOT NULL DEFAULT true",  # existing rows get true
        f"ALTER TABLE {t} RENAME COLUMN v TO value",
        f"ALTER TABLE {t} ALTER COLUMN value TYPE bigint",
    ):
        before = ws.table("things").copy_seq
        ws.sql(alter)
        ws.sql(f"UPDATE {t} SET id = id WHERE id = 1")  # a change that carries the new schema
        wait_until(lambda: ws.table("things").copy_seq != before and ws.table("things").readable, None, f"re-copy after {alter}")
        ws.wait_caught_up("things")
        assert same(ws, spark, catalog, t), alter
