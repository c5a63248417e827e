"""Issue 14: `htap verify data` on a MariaDB source — checksums computed in MariaDB at a
consistent snapshot whose binlog position is the replica seq; an injected divergence is
reported by exact key; no false alarm while writes go on."""

from __future__ import annotations

import decimal
import random
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import tune
from mysql_support import my_connect
from test_verify_data import _holds, load_warehouse, verify

COLUMNS = """
    id int PRIMARY KEY, name varchar(40), amount decimal(12,2), at timestamp(3) NULL, local datetime(6), day date,
    code char(4), payload varbinary(8), big bigint unsigned, doc json, bits bit(10), tm time, yr year,
    label varchar(10) COLLATE utf8mb4_general_ci
"""
ROWS = """
    SELECT seq, concat('name ', seq), CASE WHEN seq % 17 = 0 THEN NULL ELSE seq * 1.25 END,
           TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq * 37 MINUTE, '2021-03-04 05:06:07.123456' + INTERVAL seq SECOND,
           '2020-01-01' + INTERVAL seq DAY, concat('c', seq % 10), unhex(lpad(hex(seq), 8, '0')),
           18446744073709551615 - seq, json_object('g', seq), seq % 1024, SEC_TO_TIME(seq * 7 - 5000), 1901 + seq % 200,
           elt(1 + seq % 3, 'a', 'B', 'Ä')
    FROM (SELECT CAST(seq AS SIGNED) AS seq FROM seq_{lo}_to_{hi}) AS s
"""


@pytest.fixture
def my_items(my_workspace):
    ws = my_workspace
    tune(ws, compaction_interval_s=0.0, partition_rows=400)  # five partitions; no compaction under our edits
    t = f"{ws.schema}.items"
    ws.sql(f"CREATE TABLE {t} ({COLUMNS}) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t} " + ROWS.format(lo=1, hi=2000))
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("items")
    return t


def test_mariadb_injected_divergence_is_reported_by_exact_key(my_workspace, my_items):
    ws, items = my_workspace, my_items
    r, report, _ = verify(ws, "--range-rows", "300", check_rc=0)
    (t,) = report["tables"]
    assert t["ok"] and t["source_rows"] == t["replica_rows"] == 2000 and t["ranges"] >= 7
    assert report["snapshot"]["seq_position"].startswith("binlog file #")

    # dropped changes: an update, an insert and a delete whose deltas lose their metadata rows
    ws.sql(f"UPDATE {items} SET name = 'changed', doc = json_object('g', -1) WHERE id = 77")
    ws.sql("START TRANSACTION")
    ws.sql(f"INSERT INTO {items} " + ROWS.format(lo=5001, hi=5001))
    ws.sql(f"DELETE FROM {items} WHERE id = 300")
    ws.sql("COMMIT")
    ws.wait_caught_up("items")
    table = ws.table("items")
    store = ws.store()
    with store:
        newer = [d for d in store.deltas(table.id) if d.min_seq > table.copy_seq]
        assert newer and sum(d.rows for d in newer) == 3
        for d in newer:
            store._x("DELETE FROM deltas WHERE id = ?", (d.id,))
        (copy,) = [d for d in store.deltas(table.id) if _holds(ws, d.path, 1234)]
    # a delta edited behind the service's back: one value of key 1234 in the copy's file
    path = load_warehouse(ws) / copy.path
    data = pq.read_table(path)
    amount = data.column("amount")
    edited = pc.if_else(pc.equal(data.column("id"), 1234), pa.scalar(decimal.Decimal("0.00"), amount.type), amount)
    pq.write_table(data.set_column(data.schema.get_field_index("amount"), "amount", edited), path)

    r, report, _ = verify(ws, "--range-rows", "300", check_rc=1)
    (t,) = report["tables"]
    assert not t["ok"]
    assert t["missing"] == [{"id": 5001}] and t["extra"] == [{"id": 300}]
    assert [d["key"] for d in t["different"]] == [{"id": 77}, {"id": 1234}]
    by_key = {d["key"]["id"]: {c["column"]: c for c in d["columns"]} for d in t["different"]}
    assert set(by_key[77]) == {"name", "doc"} and by_key[77]["name"]["source"] == "changed"
    assert set(by_key[1234]) == {"amount"} and by_key[1234]["amount"]["source"] == "1542.50"
    assert 1 <= len(t["mismatched_ranges"]) <= 4 < t["ranges"]


def test_mariadb_float_columns_are_refused_per_table_with_the_reason(my_workspace):
    ws = my_workspace
    t = f"{ws.schema}.floats"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, d double) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t} VALUES (1, 0.5)")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("floats")
    _, report, _ = verify(ws, check_rc=1)
    (table,) = report["tables"]
    assert "column d (double" in table["error"] and "cannot be verified on a MySQL/MariaDB source yet" in table["error"]


def test_mariadb_no_false_mismatches_under_concurrent_writes(my_workspace, my_items):
    ws, items = my_workspace, my_items
    stop = threading.Event()
    commits = [0]
    errors = []

    def writer():
        conn = my_connect(ws.schema)
        rnd = random.Random(7)
        next_id = 10_000
        try:
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute("START TRANSACTION")
                    for _ in range(rnd.randint(1, 4)):
                        op, key = rnd.random(), rnd.randint(1, 2000)
                        if op < 0.6:
                            cur.execute(f"UPDATE {items} SET amount = amount + 1, name = concat(name, '.'),"
                                        f" at = now(3) WHERE id = %s", (key,))
                        elif op < 0.85:
                            next_id += 1
                            cur.execute(f"INSERT INTO {items} " + ROWS.format(lo=next_id, hi=next_id))
                        else:
                            cur.execute(f"DELETE FROM {items} WHERE id = %s", (key,))
                    cur.execute("COMMIT")
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
        for args in (["--parallelism", "4", "--range-rows", "150"], ["--range-rows", "500"]):
            before = commits[0]
            r, report, _ = verify(ws, *args)
            (t,) = report["tables"]
            assert r.returncode == 0 and report["ok"], str(t)[:3000]
            assert t["mismatched_ranges"] == [] and t["source_rows"] == t["replica_rows"] > 1500
            assert commits[0] > before  # writes went on while it ran
            seqs.append(report["snapshot"]["seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == 2
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors
