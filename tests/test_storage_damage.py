"""Issue 3: a corrupt or missing delta file names the file and table, marks the table
unhealthy (so it can fail over) and stops nothing else."""

from __future__ import annotations

import json

import pytest

from conftest import normalized, wait_until


def test_corrupt_and_missing_delta_files(workspace, spark, catalog):
    ws = workspace
    for name in ("a", "b", "c"):
        ws.sql(f"CREATE TABLE {ws.schema}.{name} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {ws.schema}.{name} SELECT g, 'v' || g FROM generate_series(1, 50) g")
        ws.htap("tables", "add", f"{ws.schema}.{name}")
    ws.start_service()
    for name in ("a", "b", "c"):
        ws.wait_readable(name)

    from htap.conf import load_config

    cfg = load_config(ws.config)
    store = ws.store()
    corrupt = cfg.warehouse / store.deltas(ws.table("a").id)[0].path
    missing = cfg.warehouse / store.deltas(ws.table("c").id)[0].path
    store.close()
    corrupt.write_bytes(b"this is not parquet" * 10)
    missing.unlink()

    with pytest.raises(Exception) as damaged:
        spark.sql(f"SELECT count(*) FROM {catalog}.{ws.schema}.a").collect()
    assert str(corrupt) in str(damaged.value) and f"{ws.schema}.a" in str(damaged.value)
    with pytest.raises(Exception) as gone:
        spark.sql(f"SELECT * FROM {catalog}.{ws.schema}.c").collect()
    assert f"delta file {missing}" in str(gone.value) and "is missing" in str(gone.value)

    # The driver marks them (executors only read the metadata store), just after the query failed.
    wait_until(lambda: ws.table("a").state == "unhealthy" and ws.table("c").state == "unhealthy", None,
               "the driver to mark tables a and c unhealthy")
    assert str(corrupt) in ws.table("a").error
    status = {s["table"]: s for s in json.loads(ws.htap("status", "--json").stdout)["tables"]}
    assert status[f"{ws.schema}.a"]["state"] == "unhealthy"

    # Nothing else stopped: table b still reads and still follows changes.
    ws.sql(f"UPDATE {ws.schema}.b SET v = 'changed' WHERE id = 1")
    ws.wait_caught_up("b")
    got = spark.sql(f"SELECT * FROM {catalog}.{ws.schema}.b").collect()
    assert normalized(got) == normalized(ws.sql(f"SELECT * FROM {ws.schema}.b"))
    assert ws.service.poll() is None  # the service kept running
