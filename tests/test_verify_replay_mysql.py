"""Issue 14: `htap verify replay` on a MariaDB source — a query log through Spark on the replica
and on MariaDB at one snapshot (a consistent snapshot at the binlog position = replica seq):
all agree; a divergence injected into the replica is caught, naming the rows."""

from __future__ import annotations

import json
import pytest

from test_verify_replay import replay

SCHEMA = """
CREATE TABLE {s}.orders (o_orderkey int PRIMARY KEY, o_custkey int, o_status char(1), o_total decimal(15,2),
                         o_date date, o_clerk varchar(15), o_at datetime(3)) ENGINE=InnoDB;
CREATE TABLE {s}.lineitem (l_orderkey int, l_linenumber int, l_quantity decimal(15,2), l_price decimal(15,2),
                           l_flag varchar(1), l_mode varchar(10), PRIMARY KEY (l_orderkey, l_linenumber)) ENGINE=InnoDB;
INSERT INTO {s}.orders SELECT seq, seq % 50 + 1, elt(1 + seq % 3, 'F', 'O', 'P'), (seq * 7901) % 400000 + 1000 + (seq % 100) / 100,
       '1992-01-01' + INTERVAL (seq * 13 % 2400) DAY, concat('Clerk#', lpad(seq % 20, 9, '0')),
       TIMESTAMP '2020-01-01 00:00:00' + INTERVAL seq * 61 SECOND FROM seq_1_to_600;
INSERT INTO {s}.lineitem SELECT o.seq, l.seq, (o.seq * 7 + l.seq * 3) % 50 + 1, ((o.seq * 7 + l.seq * 3) % 50 + 1) * 9.5,
       elt(1 + (o.seq + l.seq) % 3, 'R', 'A', 'N'), elt(1 + (o.seq * l.seq) % 4, 'AIR', 'RAIL', 'SHIP', 'TRUCK')
FROM seq_1_to_600 o, seq_1_to_4 l WHERE l.seq <= 1 + o.seq % 4
"""

LOG = """
select o_status, count(*), sum(o_total), min(o_date), max(o_clerk) from {s}.orders where o_orderkey > 10 group by o_status;
select count(*), sum(l_quantity * l_price) from {s}.lineitem where l_mode in ('AIR', 'RAIL') and l_quantity < 24;
select o_orderkey, o_total, o_at from {s}.orders where o_clerk like 'Clerk#%1' order by o_orderkey;
select o_status, sum(l_price) from {s}.orders join {s}.lineitem on o_orderkey = l_orderkey where o_date >= date '1995-01-01' group by o_status;
select o_orderkey, o_custkey from {s}.orders where o_custkey between 3 and 5 order by 1;
"""


@pytest.fixture
def my_tpch(my_workspace):
    ws = my_workspace
    for statement in SCHEMA.format(s=ws.schema).split(";"):
        if statement.strip():
            ws.sql(statement)
    for t in ("orders", "lineitem"):
        ws.htap("tables", "add", f"{ws.schema}.{t}")
    ws.start_service()
    for t in ("orders", "lineitem"):
        ws.wait_readable(t)
    return ws


def test_replay_on_mariadb_agrees_and_catches_an_injected_divergence(my_tpch, tmp_path):
    ws = my_tpch
    log = tmp_path / "log.sql"
    log.write_text(LOG.format(s=ws.schema))
    r = replay(ws, log, tmp_path / "ok")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    report = json.loads((tmp_path / "ok" / "replay.json").read_text())
    assert [q["status"] for q in report["queries"]] == ["agree"] * 5
    assert report["snapshot"]["seq_position"].startswith("binlog file #")

    # A change the replica never received: the delta holding it loses its metadata row.
    ws.sql(f"UPDATE {ws.schema}.orders SET o_custkey = 4 WHERE o_orderkey = 77")
    ws.wait_caught_up("orders")
    table = ws.table("orders")
    store = ws.store()
    with store:
        newer = [d for d in store.deltas(table.id) if d.min_seq > table.copy_seq]
        assert newer and sum(d.rows for d in newer) == 1
        for d in newer:
            store._x("DELETE FROM deltas WHERE id = ?", (d.id,))
    r = replay(ws, log, tmp_path / "diverged")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    report = json.loads((tmp_path / "diverged" / "replay.json").read_text())
    (bad,) = [q for q in report["queries"] if "between" in q["sql"].lower()]
    assert bad["status"] == "mismatch", json.dumps(report["queries"], indent=1)[:3000]
    assert [q["status"] for q in report["queries"] if q is not bad] == ["agree"] * 4
    assert bad["diff"]["source_rows"] == bad["diff"]["replica_rows"] + 1
    assert "77" in json.dumps(bad["diff"])
