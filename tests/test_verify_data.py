"""Issue 6: `htap verify data` — exact keys for injected divergence, no false alarms under writes."""

from __future__ import annotations

import decimal
import json
import os
import random
import threading
import time

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import tune
from services import pg_dsn

COLUMNS = """
    id int PRIMARY KEY, name text, amount numeric(12,2), score double precision, ratio real,
    at timestamptz, day date, flag boolean, note varchar(20), code char(4), payload bytea, doc jsonb,
    big bigint, unbounded numeric
"""
ROWS = """
    SELECT g, 'name ' || g, CASE WHEN g % 17 = 0 THEN NULL ELSE g * 1.25 END, g / 7.0, (g % 13) / 3.0,
           timestamptz '2024-01-01 00:00:00+00' + g * interval '37 minutes 1.5 seconds', date '2020-01-01' + g,
           g % 2 = 0, CASE WHEN g % 5 = 0 THEN NULL ELSE 'n|' || g END, 'c' || (g % 10),
           decode(lpad(to_hex(g), 8, '0'), 'hex'), jsonb_build_object('g', g, 's', 'x' || g),
           g::bigint * 1000000007, round(g / 3.0, 6)
    FROM generate_series({lo}, {hi}) g
"""


def verify(ws, *args, check_rc=None):
    out = ws.root / f"verify-{time.monotonic_ns()}"
    r = ws.htap("verify", "data", "--out", str(out), *args, check=False)
    if r.returncode not in (0, 1):
        pytest.fail(f"htap verify data failed ({r.returncode}): {r.stderr}\n{r.stdout}")
    if check_rc is not None:
        assert r.returncode == check_rc, r.stdout + r.stderr
    return r, json.loads((out / "data.json").read_text()), out


@pytest.fixture
def items(workspace):
    ws = workspace
    tune(ws, compaction_interval_s=0.0, partition_rows=400)  # five partitions; no compaction under our edits
    t = f"{ws.schema}.items"
    ws.sql(f"CREATE TABLE {t} ({COLUMNS})")
    ws.sql(f"INSERT INTO {t} " + ROWS.format(lo=1, hi=2000))
    ws.htap("tables", "add", t, "--column-type", "unbounded=string")  # numeric without a precision: its text
    ws.start_service()
    ws.wait_readable("items")
    return t


def test_injected_divergence_is_reported_by_exact_key(workspace, items):
    ws = workspace
    r, report, _ = verify(ws, "--range-rows", "300", check_rc=0)
    (t,) = report["tables"]
    assert t["ok"] and t["source_rows"] == t["replica_rows"] == 2000
    assert t["ranges"] >= 7  # partition bounds and quantiles
    # bounded load: 2000 rows at 800 rows/s (one second of burst) must wait about 1.5 s
    _, limited, _ = verify(ws, "--range-rows", "250", "--max-rows-per-second", "800", "--parallelism", "4", check_rc=0)
    assert limited["rate_limit_wait_s"] > 1.0  # time the token bucket made it sleep: a lower bound, not a speed

    # (b) dropped changes: an update, an insert and a delete whose deltas lose their metadata rows
    ws.sql(f"UPDATE {items} SET name = 'changed', score = '-0'::float8 WHERE id = 77")
    with ws.pg.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {items} " + ROWS.format(lo=5001, hi=5001))
        cur.execute(f"DELETE FROM {items} WHERE id = 300")
        cur.execute("COMMIT")
    ws.wait_caught_up("items")
    table = ws.table("items")
    store = ws.store()
    with store:
        newer = [d for d in store.deltas(table.id) if d.min_seq > table.copy_seq]
        assert newer and sum(d.rows for d in newer) == 3
        for d in newer:
            store._x("DELETE FROM deltas WHERE id = ?", (d.id,))
        # (a) a delta edited behind the service's back: one value of key 1234 in the copy's file
        (copy,) = [d for d in store.deltas(table.id) if _holds(ws, d.path, 1234)]
    path = load_warehouse(ws) / copy.path
    data = pq.read_table(path)
    amount = data.column("amount")
    edited = pc.if_else(pc.equal(data.column("id"), 1234), pa.scalar(decimal.Decimal("0.00"), amount.type), amount)
    pq.write_table(data.set_column(data.schema.get_field_index("amount"), "amount", edited), path)

    r, report, out = verify(ws, "--range-rows", "300", "--parallelism", "3", check_rc=1)
    (t,) = report["tables"]
    assert not t["ok"]
    assert t["missing"] == [{"id": 5001}] and t["missing_count"] == 1
    assert t["extra"] == [{"id": 300}] and t["extra_count"] == 1
    assert [d["key"] for d in t["different"]] == [{"id": 77}, {"id": 1234}]
    by_key = {d["key"]["id"]: {c["column"]: c for c in d["columns"]} for d in t["different"]}
    assert set(by_key[77]) == {"name", "score"}
    assert by_key[77]["name"]["source"] == "changed" and by_key[77]["name"]["replica"] == "name 77"
    assert set(by_key[1234]) == {"amount"} and by_key[1234]["amount"]["source"] == "1542.50"
    assert "missing: {\"id\": 5001}" in r.stdout and "extra: {\"id\": 300}" in r.stdout
    # only the mismatching ranges were listed key by key
    assert 1 <= len(t["mismatched_ranges"]) <= 4 < t["ranges"]

    # great-expectations validation results, one suite per table
    (suite,) = (out / "expectations").glob("*.json")
    v = json.loads(suite.read_text())
    assert v["suite_name"] == f"htap_verify.{ws.source}.{items}" and v["success"] is False
    failed = {r["expectation_config"]["kwargs"].get("description"): r for r in v["results"] if not r["success"]}
    assert failed["every source row's key is in the replica"]["result"]["details"]["unexpected_rows"] == [{"id": 5001}]
    assert failed["every replica row's key is in the source"]["result"]["observed_value"] == 1
    assert {r["expectation_config"]["type"] for r in v["results"]} == {"expect_table_row_count_to_equal", "unexpected_rows_expectation"}
    assert v["statistics"]["evaluated_expectations"] == len(v["results"]) == 5 and v["statistics"]["successful_expectations"] == 1  # the row counts agree: 1 missing, 1 extra

    # --mark-unhealthy: the table fails over to the source
    verify(ws, "--range-rows", "300", "--mark-unhealthy", items, check_rc=1)
    state = ws.table("items")
    assert state.state == "unhealthy" and "1 missing, 1 extra, 2 different" in state.error and "5001" in state.error


def load_warehouse(ws):
    from htap.conf import load_config

    return load_config(ws.config).warehouse


def _holds(ws, rel: str, key: int) -> bool:
    ids = pq.read_table(load_warehouse(ws) / rel, columns=["id"]).column("id")
    return pc.any(pc.equal(ids, key)).as_py()


def test_no_false_mismatches_under_concurrent_writes(workspace, items):
    ws = workspace
    stop = threading.Event()
    commits = [0]
    errors = []

    def writer():
        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = False
        rnd = random.Random(7)
        next_id = 10_000
        try:
            while not stop.is_set():
                with conn.cursor() as cur:
                    for _ in range(rnd.randint(1, 4)):
                        op = rnd.random()
                        key = rnd.randint(1, 2000)
                        if op < 0.6:
                            cur.execute(
                                f"UPDATE {items} SET amount = amount + 1, name = name || '.', score = random(),"
                                f" at = now(), flag = NOT flag WHERE id = %s", (key,),
                            )
                        elif op < 0.85:
                            next_id += 1
                            cur.execute(f"INSERT INTO {items} " + ROWS.format(lo=next_id, hi=next_id))
                        else:
                            cur.execute(f"DELETE FROM {items} WHERE id = %s", (key,))
                conn.commit()
                commits[0] += 1
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            conn.close()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        seqs = []
        variants = [["--parallelism", "4", "--range-rows", "150"], ["--parallelism", "1"], ["--range-rows", "500"]]
        soak_until = time.monotonic() + float(os.environ.get("HTAP_TEST_VERIFY_SOAK_S", "0"))  # a longer run on demand
        runs = 0
        while runs < len(variants) or time.monotonic() < soak_until:
            args = variants[runs % len(variants)]
            runs += 1
            before = commits[0]
            r, report, _ = verify(ws, *args)
            (t,) = report["tables"]
            assert r.returncode == 0 and report["ok"], json.dumps(t, indent=1)[:3000]
            assert t["mismatched_ranges"] == [] and t["source_rows"] == t["replica_rows"] > 1500
            assert commits[0] > before  # writes went on while it ran
            seqs.append(report["snapshot"]["seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == runs
        print(f"{runs} verify runs under {commits[0]} concurrent transactions: no false mismatch")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors
