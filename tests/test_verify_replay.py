"""Issue 6: `htap verify replay` — a TPC-H query log through Spark on the replica and on the
source at one snapshot: all agree, literal-only variants are deduplicated, a broken pushdown
(test switch) is caught."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import psycopg2
import pytest

from conftest import HTAP
from services import pg_dsn

pytestmark = pytest.mark.slow  # replays a 53-statement log through Spark, twice

SAMPLE = Path(__file__).resolve().parent.parent / "verify" / "samples" / "tpch_queries.sql"

TPCH = """
CREATE TABLE {s}.region (r_regionkey int PRIMARY KEY, r_name varchar(25) NOT NULL, r_comment varchar(152));
CREATE TABLE {s}.nation (n_nationkey int PRIMARY KEY, n_name varchar(25) NOT NULL, n_regionkey int NOT NULL,
                         n_comment varchar(152));
CREATE TABLE {s}.supplier (s_suppkey int PRIMARY KEY, s_name varchar(25), s_address varchar(40), s_nationkey int,
                           s_phone varchar(15), s_acctbal numeric(15,2), s_comment varchar(101));
CREATE TABLE {s}.customer (c_custkey int PRIMARY KEY, c_name varchar(25), c_address varchar(40), c_nationkey int,
                           c_phone varchar(15), c_acctbal numeric(15,2), c_mktsegment varchar(10), c_comment varchar(117));
CREATE TABLE {s}.part (p_partkey int PRIMARY KEY, p_name varchar(55), p_mfgr varchar(25), p_brand varchar(10),
                       p_type varchar(25), p_size int, p_container varchar(10), p_retailprice numeric(15,2),
                       p_comment varchar(23));
CREATE TABLE {s}.partsupp (ps_partkey int, ps_suppkey int, ps_availqty int, ps_supplycost numeric(15,2),
                           ps_comment varchar(199), PRIMARY KEY (ps_partkey, ps_suppkey));
CREATE TABLE {s}.orders (o_orderkey int PRIMARY KEY, o_custkey int, o_orderstatus varchar(1), o_totalprice numeric(15,2),
                         o_orderdate date, o_orderpriority varchar(15), o_clerk varchar(15), o_shippriority int,
                         o_comment varchar(79));
CREATE TABLE {s}.lineitem (l_orderkey int, l_partkey int, l_suppkey int, l_linenumber int, l_quantity numeric(15,2),
                           l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2),
                           l_returnflag varchar(1), l_linestatus varchar(1), l_shipdate date, l_commitdate date,
                           l_receiptdate date, l_shipinstruct varchar(25), l_shipmode varchar(10), l_comment varchar(44),
                           PRIMARY KEY (l_orderkey, l_linenumber));

INSERT INTO {s}.region VALUES (0, 'AFRICA', 'r0'), (1, 'AMERICA', 'r1'), (2, 'ASIA', 'r2'), (3, 'EUROPE', 'r3'),
                              (4, 'MIDDLE EAST', 'r4');
INSERT INTO {s}.nation
SELECT i - 1, n, r, 'nation ' || n FROM unnest(
  ARRAY['ALGERIA', 'ARGENTINA', 'BRAZIL', 'CANADA', 'EGYPT', 'ETHIOPIA', 'FRANCE', 'GERMANY', 'INDIA', 'INDONESIA',
        'IRAN', 'IRAQ', 'JAPAN', 'JORDAN', 'KENYA', 'MOROCCO', 'MOZAMBIQUE', 'PERU', 'CHINA', 'ROMANIA',
        'SAUDI ARABIA', 'VIETNAM', 'RUSSIA', 'UNITED KINGDOM', 'UNITED STATES'],
  ARRAY[0, 1, 1, 1, 4, 0, 3, 3, 2, 2, 4, 4, 2, 4, 0, 0, 0, 1, 2, 3, 4, 2, 3, 3, 1]) WITH ORDINALITY AS t(n, r, i);
INSERT INTO {s}.supplier
SELECT g, 'Supplier#' || lpad(g::text, 9, '0'), 'addr ' || left(md5(g::text), 12), g % 25,
       (10 + g % 25) || '-' || (100 + g * 7 % 900) || '-' || (1000 + g * 13 % 9000),
       ((g * 7919) % 1100000 - 100000) / 100.0,
       CASE WHEN g % 10 = 3 THEN 'slow Customer filed Complaints ' || g ELSE 'supplier comment ' || g END
FROM generate_series(1, 40) g;
INSERT INTO {s}.customer
SELECT g, 'Customer#' || lpad(g::text, 9, '0'), 'caddr ' || left(md5(g::text), 10), g % 25,
       (10 + g % 25) || '-' || (100 + g * 11 % 900) || '-' || (1000 + g * 17 % 9000),
       ((g * 7907) % 1100000 - 100000) / 100.0,
       (ARRAY['AUTOMOBILE', 'BUILDING', 'FURNITURE', 'MACHINERY', 'HOUSEHOLD'])[1 + g % 5], 'customer comment ' || g
FROM generate_series(1, 150) g;
INSERT INTO {s}.part
SELECT g,
       (ARRAY['almond', 'antique', 'aquamarine', 'azure', 'beige', 'forest', 'green', 'red', 'blue', 'ivory'])[1 + g % 10]
         || ' ' || (ARRAY['chiffon', 'green', 'lace', 'red', 'smoke', 'forest', 'linen', 'navy', 'plum', 'snow'])[1 + g * 7 % 10],
       'Manufacturer#' || (1 + g % 5), 'Brand#' || (1 + g % 5) || (1 + (g / 5) % 5),
       (ARRAY['STANDARD', 'SMALL', 'MEDIUM', 'LARGE', 'ECONOMY', 'PROMO'])[1 + g % 6] || ' '
         || (ARRAY['ANODIZED', 'BURNISHED', 'PLATED', 'POLISHED', 'BRUSHED'])[1 + (g / 6) % 5] || ' '
         || (ARRAY['TIN', 'NICKEL', 'BRASS', 'STEEL', 'COPPER'])[1 + (g / 30) % 5],
       1 + g % 50,
       (ARRAY['SM', 'MED', 'LG', 'JUMBO', 'WRAP'])[1 + g % 5] || ' '
         || (ARRAY['CASE', 'BOX', 'BAG', 'JAR', 'PKG', 'PACK', 'CAN', 'DRUM'])[1 + (g / 5) % 8],
       900 + g % 200 + (g % 100) / 100.0, 'part ' || g
FROM generate_series(1, 200) g;
INSERT INTO {s}.partsupp
SELECT p, (p + i * 10) % 40 + 1, (p * 31 + i * 17) % 9999 + 1, ((p * 13 + i * 7) % 100000) / 100.0 + 1, 'ps ' || p || '/' || i
FROM generate_series(1, 200) p, generate_series(0, 3) i;
INSERT INTO {s}.orders
SELECT g, (((g * 7) % 100) / 2) * 3 + ((g * 7) % 100) % 2 + 1, (ARRAY['F', 'O', 'P'])[1 + g % 3],
       ((g * 7901) % 400000) + 1000 + (g % 100) / 100.0, date '1992-01-01' + (g * 13 % 2400),
       (ARRAY['1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'])[1 + g % 5], 'Clerk#' || lpad((g % 20)::text, 9, '0'),
       0, CASE g % 7 WHEN 0 THEN 'the special requests sleep ' || g WHEN 1 THEN 'express deposits ' || g ELSE 'plain ' || g END
FROM generate_series(1, 600) g;
INSERT INTO {s}.lineitem
SELECT o, p, (p + ((o + ln) % 4) * 10) % 40 + 1, ln, q, q * (900 + p % 200) / 10.0, ((o + ln) % 11) / 100.0, ((o * ln) % 9) / 100.0,
       CASE WHEN ship > date '1995-06-17' THEN 'N' WHEN (o + ln) % 2 = 0 THEN 'R' ELSE 'A' END,
       CASE WHEN ship > date '1995-06-17' THEN 'O' ELSE 'F' END,
       ship, od + (30 + (o + ln) % 61), ship + (1 + (o * 3 + ln) % 30),
       (ARRAY['DELIVER IN PERSON', 'COLLECT COD', 'NONE', 'TAKE BACK RETURN'])[1 + (o + ln) % 4],
       (ARRAY['REG AIR', 'AIR', 'RAIL', 'SHIP', 'TRUCK', 'MAIL', 'FOB'])[1 + (o * ln) % 7], 'line ' || o || '/' || ln
FROM generate_series(1, 600) o, generate_series(1, 7) ln,
     LATERAL (SELECT date '1992-01-01' + (o * 13 % 2400) AS od, (o * 31 + ln * 17) % 200 + 1 AS p,
                     ((o * 7 + ln * 3) % 50 + 1)::numeric AS q) x,
     LATERAL (SELECT od + (1 + (o * ln) % 121) AS ship) y
WHERE ln <= 1 + o % 7;
"""
TABLES = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]


@pytest.fixture
def tpch(workspace):
    ws = workspace
    with ws.pg.cursor() as cur:
        cur.execute(TPCH.format(s=ws.schema))
    for t in TABLES:
        ws.htap("tables", "add", f"{ws.schema}.{t}")
    ws.start_service()
    for t in TABLES:
        ws.wait_readable(t)
    return ws


def replay(ws, log: Path, out: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*HTAP, "--config", str(ws.config), "verify", "replay", str(log), "--out", str(out)],
        capture_output=True, text=True, cwd=ws.root, env={**os.environ, **(env or {})}, timeout=900,
    )


def writer(ws, stop: threading.Event, commits: list) -> None:
    """Transactions on orders and lineitem until stopped (the replay must not see any of them)."""
    conn = psycopg2.connect(pg_dsn())
    rnd = random.Random(3)
    new = 10_000
    try:
        while not stop.is_set():
            with conn, conn.cursor() as cur:
                o = rnd.randint(1, 600)
                cur.execute(f"UPDATE {ws.schema}.lineitem SET l_quantity = l_quantity + 1,"
                            f" l_extendedprice = l_extendedprice + 10 WHERE l_orderkey = %s", (o,))
                cur.execute(f"UPDATE {ws.schema}.orders SET o_totalprice = o_totalprice + 1 WHERE o_orderkey = %s", (o,))
                if rnd.random() < 0.3:
                    new += 1
                    cur.execute(f"INSERT INTO {ws.schema}.orders SELECT %s, o_custkey, o_orderstatus, o_totalprice,"
                                f" o_orderdate, o_orderpriority, o_clerk, o_shippriority, o_comment"
                                f" FROM {ws.schema}.orders WHERE o_orderkey = %s", (new, o))
                    cur.execute(f"INSERT INTO {ws.schema}.lineitem SELECT %s, l_partkey, l_suppkey, l_linenumber,"
                                f" l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate,"
                                f" l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, l_comment"
                                f" FROM {ws.schema}.lineitem WHERE l_orderkey = %s", (new, o))
            commits[0] += 1
            time.sleep(0.1)
    finally:
        conn.close()


def test_replay_tpch_log_all_agree_and_deduplicates(tpch, spark, capsys):
    """In this process, on the tests' Spark session (the CLI and its exit status: the next test),
    while a writer commits to orders and lineitem: both sides read the one snapshot."""
    from htap.conf import load_config
    from htap.verify.replay import ReplayOptions, run_replay

    ws = tpch
    started = time.monotonic()
    stop, commits = threading.Event(), [0]
    thread = threading.Thread(target=writer, args=(ws, stop, commits), daemon=True)
    thread.start()
    try:
        rc = run_replay(load_config(ws.config), [str(SAMPLE)], ReplayOptions(out=ws.root / "ok"), spark=spark)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert commits[0] > 0  # writes went on during the replay
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err[-5000:]
    report = json.loads((ws.root / "ok" / "replay.json").read_text())
    assert report["ok"] and report["counts"] == {"agree": 40, "mismatch": 0, "error": 0}
    assert report["statements"] == 53 and report["patterns"] == 40 and report["duplicates"] == 8
    reasons = sorted(d["reason"] for d in report["dropped"])
    assert len(reasons) == 5 and sum("side effects" in x for x in reasons) == 2
    assert {"non-deterministic: rand", "non-deterministic: currentdate", "non-deterministic: LIMIT without ORDER BY"} <= set(reasons)
    q1 = next(q for q in report["queries"] if q["origin"].endswith(":1"))
    assert q1["occurrences"] == 2 and "?" in q1["pattern"] and "<catalog>" in q1["sql"]
    # The dataset makes the comparisons meaningful: most queries return rows.
    assert sum(q["replica"]["rows"] > 0 for q in report["queries"]) >= 34
    for q in report["queries"]:
        assert q["replica"]["wall_s"] > 0 and q["source"]["wall_s"] > 0
    assert report["totals"]["replica"]["spark_cpu_s"] > 0 and report["totals"]["source"]["source_cpu_s"] is not None
    suite = ET.parse(ws.root / "ok" / "replay.junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "45" and suite.get("failures") == "0" and suite.get("skipped") == "5"
    print(f"replay of {report['patterns']} patterns took {time.monotonic() - started:.1f} s; totals {report['totals']}")


def test_replay_catches_a_broken_pushdown(tpch, tmp_path):
    ws = tpch
    log = tmp_path / "log"
    log.mkdir()
    statements = SAMPLE.read_text().split(";")
    q6 = next(s for s in statements if "-- Q6" in s)
    (log / "a.sql").write_text(q6 + ";\nselect count(*), sum(o_totalprice) from orders where o_orderdate >= date '1995-01-01';\n")
    (log / "b.sql").write_text("select l_orderkey, l_quantity from lineitem where l_quantity < 3 order by 1, 2;\n")
    # The only `<` in the condition of a semi join a whole pushed subtree runs (issue 26): the
    # switch lives in the replica's dialect, so it reaches that too.
    (log / "c.sql").write_text("select count(*) from orders o where exists (select 1 from lineitem l where"
                               " l.l_orderkey = o.o_orderkey and l.l_linenumber < o.o_shippriority + 2"
                               " and l.l_quantity > 45);\n")
    r = replay(ws, log, tmp_path / "broken", env={"HTAP_TEST_BREAK_PUSHDOWN": "1"})
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    report = json.loads((tmp_path / "broken" / "replay.json").read_text())
    by_origin = {Path(q["origin"]).name: q for q in report["queries"]}
    assert by_origin["a.sql:1"]["status"] == "mismatch"  # Q6: l_quantity < 24 read as <= 24
    assert by_origin["a.sql:2"]["status"] == "agree"  # no `<` pushed: unaffected
    bad = by_origin["b.sql:1"]
    assert bad["status"] == "mismatch" and bad["diff"]["replica_rows"] > bad["diff"]["source_rows"]
    assert by_origin["c.sql:1"]["status"] == "mismatch", by_origin["c.sql:1"]
    assert "MISMATCH" in r.stdout
    suite = ET.parse(tmp_path / "broken" / "replay.junit.xml").getroot().find("testsuite")
    assert suite.get("failures") == "3" and len(suite.findall("testcase/failure")) == 3
