"""Issue 4 (MySQL/MariaDB): binlog CDC into the replica, read by Spark through the catalog.

Runs against the real MariaDB (binlog ROW, FULL row images). Every comparison is Spark's result
through the catalog against MariaDB's own answer to the same question.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time

import duckdb
import pymysql
import pytest

from conftest import DEADLINE_S, normalized, wait_until
from workspace import live_delta_files
from mysql_support import master_seq, my_connect, my_server

TYPES_DDL = """
CREATE TABLE {t} (
  id int unsigned PRIMARY KEY,
  ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned, mi mediumint, mu mediumint unsigned,
  i int, bi bigint, bu bigint unsigned, flag bool,
  price decimal(12,2), big decimal(38,10), f float, d double,
  c char(8), vc varchar(40), tx text, lt longtext,
  bn binary(4), vb varbinary(16), bl blob,
  dt date, dtm datetime, dtm6 datetime(6), ts timestamp(3) NULL, tm time, tm3 time(3), yr year,
  doc json, color enum('red', 'green', 'blue'), tags set('a', 'b', 'c'), bits bit(10), wide bit(64)
) ENGINE=InnoDB"""

TYPES_INSERT = """
INSERT INTO {t}
SELECT seq, seq % 256 - 128, seq % 256, seq * 7 - 32768, seq * 11, seq * 1000 - 8388608, seq * 1013,
  seq * 100003, seq * 10000000019, 18446744073709551615 - seq, seq % 2,
  seq * 1.25, seq / 7, seq / 3, seq / 7,
  concat('c', seq % 5), concat('name ', seq, ' é'), repeat('text ', seq % 7), repeat('x', seq * 37),
  unhex(lpad(hex(seq), 4, '0')), unhex(lpad(hex(seq * 65537), 8, '0')), unhex(repeat(lpad(hex(seq % 256), 2, '0'), seq % 9)),
  '2020-01-01' + INTERVAL seq DAY, '2021-03-04 05:06:07' + INTERVAL seq HOUR,
  '2021-03-04 05:06:07.123456' + INTERVAL seq MINUTE, '2022-05-06 07:08:09.250' + INTERVAL seq SECOND,
  SEC_TO_TIME(seq * 977 - 400000), SEC_TO_TIME(seq * 13.125), 1901 + seq % 254,
  json_object('g', seq, 'tags', json_array(seq, 'x')), elt(1 + seq % 3, 'red', 'green', 'blue'),
  elt(1 + seq % 4, '', 'a', 'b,c', 'a,b,c'), seq % 1024, seq * 12345678901
FROM (SELECT CAST(seq AS SIGNED) AS seq FROM seq_{lo}_to_{hi}) AS s"""

# What Spark sees, asked of MariaDB: FLOAT widened exactly, TIME and BIT as the replica keeps them, CHAR(n)
# padded to n as Spark reads a CHAR(n) column (read-side padding).
TYPES_QUERY = """
SELECT id, ti, tu, si, su, mi, mu, i, bi, CAST(bu AS DECIMAL(20,0)), flag, price, big, CAST(f AS DOUBLE), d,
  RPAD(c, 8, ' '), vc, tx, lt, bn, vb, bl, dt, dtm, dtm6, ts, CAST(tm AS CHAR), CAST(tm3 AS CHAR), yr,
  doc, color, tags, CAST(bits AS UNSIGNED), CAST(CAST(wide AS UNSIGNED) AS DECIMAL(20,0))
FROM {t}"""


def spark_rows(spark, catalog, table, columns="*"):
    return normalized(spark.sql(f"SELECT {columns} FROM {catalog}.{table}").collect())


def assert_same(got: list[tuple], want: list[tuple], what: str) -> None:
    """Equal row lists; on a difference, name the first differing row and columns."""
    if got == want:
        return
    by_key_got, by_key_want = {r[0]: r for r in got}, {r[0]: r for r in want}
    missing, extra = sorted(by_key_want.keys() - by_key_got.keys()), sorted(by_key_got.keys() - by_key_want.keys())
    diffs = [
        (k, [(i, a, b) for i, (a, b) in enumerate(zip(by_key_got[k], by_key_want[k])) if a != b])
        for k in sorted(by_key_got.keys() & by_key_want.keys())
        if by_key_got[k] != by_key_want[k]
    ]
    pytest.fail(f"{what}: {len(got)} rows vs {len(want)}; missing keys {missing[:5]}, extra {extra[:5]}, differing {diffs[:3]}")


def test_every_common_type_nulls_and_changes_match_mariadb(my_workspace, spark, my_catalog):
    ws = my_workspace
    t = f"{ws.schema}.items"
    ws.sql(TYPES_DDL.format(t=t))
    ws.sql(TYPES_INSERT.format(t=t, lo=1, hi=300))  # MariaDB's sequence engine: seq_1_to_300
    ws.sql(f"INSERT INTO {t} (id, tags) VALUES (0, NULL)")  # a row of NULLs
    ws.sql(f"INSERT INTO {t} (id, tags, tm, bits, bu) VALUES (100000, '', '-838:59:59', b'1111111111', 0)")  # extremes
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("items")

    schema = {f.name: f.dataType.simpleString() for f in spark.table(f"{my_catalog}.{t}").schema.fields}
    assert schema["bu"] == "decimal(20,0)" and schema["wide"] == "decimal(20,0)" and schema["i"] == "int"
    assert schema["su"] == "int" and schema["mu"] == "int" and schema["id"] == "bigint"
    assert schema["ts"] == "timestamp" and schema["dtm6"] == "timestamp_ntz" and schema["tm"] == "string"

    query = TYPES_QUERY.format(t=t)
    assert_same(spark_rows(spark, my_catalog, t), normalized(ws.sql(query)), "initial copy")

    for change in (
        TYPES_INSERT.format(t=t, lo=301, hi=400),  # streamed rows of every type
        f"INSERT INTO {t} (id, vc, price, tags, tm3) VALUES (5000, 'new', 9.99, 'c,a', '-00:00:01.500')",
        f"UPDATE {t} SET vc = 'renamed', price = price * 2, doc = NULL, tags = 'b', bits = b'101' WHERE id % 10 = 3",
        f"UPDATE {t} SET ts = NULL, bn = x'ff', wide = 0 WHERE id BETWEEN 320 AND 330",
        f"DELETE FROM {t} WHERE id BETWEEN 100 AND 149",
        f"UPDATE {t} SET id = id + 10000 WHERE id = 7",  # a key change
        f"UPDATE {t} SET id = 7, vc = 'was 350' WHERE id = 350",  # a key change onto the key just freed
    ):
        ws.sql(change)
        ws.wait_caught_up("items")
        assert_same(spark_rows(spark, my_catalog, t), normalized(ws.sql(query)), change)

    # Pushed filters and aggregates over streamed MySQL values.
    got = spark.sql(
        f"SELECT color, count(*), sum(price), max(bu), min(dtm) FROM {my_catalog}.{t} WHERE tags LIKE 'a%' GROUP BY color"
    ).collect()
    want = ws.sql(f"SELECT color, count(*), sum(price), CAST(max(bu) AS DECIMAL(20,0)), min(dtm) FROM {t} WHERE tags LIKE 'a%' GROUP BY color")
    assert normalized(got) == normalized(want)


def test_composite_keys_key_updates_deletes_and_truncate(my_workspace, spark, my_catalog):
    ws = my_workspace
    t = f"{ws.schema}.lines"
    ws.sql(f"CREATE TABLE {t} (order_id int, line varchar(10), qty int, note text, PRIMARY KEY (order_id, line))")
    ws.sql(f"INSERT INTO {t} SELECT seq DIV 10, concat('l', seq % 10), seq, NULL FROM seq_0_to_199")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("lines")

    ws.sql(f"UPDATE {t} SET line = concat(line, 'x') WHERE order_id = 3")
    ws.sql(f"UPDATE {t} SET order_id = 999, qty = NULL, note = 'moved' WHERE order_id = 4 AND line = 'l2'")
    ws.sql(f"DELETE FROM {t} WHERE order_id = 5")
    ws.sql(f"INSERT INTO {t} VALUES (5, 'l0', 1, 'back')")
    # One transaction: a swap of two keys' payloads through a key change, and a delete.
    ws.sql("BEGIN")
    ws.sql(f"UPDATE {t} SET order_id = 1000 WHERE order_id = 6 AND line = 'l1'")
    ws.sql(f"UPDATE {t} SET order_id = 6 WHERE order_id = 6 AND line = 'l2'")
    ws.sql(f"DELETE FROM {t} WHERE order_id = 7")
    ws.sql("COMMIT")
    ws.wait_caught_up("lines")
    assert spark_rows(spark, my_catalog, t) == normalized(ws.sql(f"SELECT * FROM {t}"))
    got = spark.sql(f"SELECT order_id, count(*), sum(qty) FROM {my_catalog}.{t} WHERE order_id IN (3, 4, 5, 999, 1000) GROUP BY order_id")
    want = ws.sql(f"SELECT order_id, count(*), sum(qty) FROM {t} WHERE order_id IN (3, 4, 5, 999, 1000) GROUP BY order_id")
    assert normalized(got.collect()) == normalized(want)

    # TRUNCATE hides everything older; rows written after it stay.
    ws.sql(f"INSERT INTO {t} VALUES (2000, 'a', 1, NULL)")
    ws.sql(f"TRUNCATE TABLE {t}")
    ws.sql(f"INSERT INTO {t} VALUES (1, 'after', 2, 'kept')")
    ws.wait_caught_up("lines")
    assert spark_rows(spark, my_catalog, t) == [(1, "after", 2, "kept")]
    ws.sql(f"TRUNCATE {t}")  # the other spelling
    ws.sql(f"INSERT INTO {t} VALUES (2, 'last', 3, NULL)")
    ws.wait_caught_up("lines")
    assert spark_rows(spark, my_catalog, t) == [(2, "last", 3, None)]
    assert spark.sql(f"SELECT count(*) FROM {my_catalog}.{t}").collect()[0][0] == 1


def test_sigkill_mid_stream_loses_and_duplicates_nothing(my_workspace, spark, my_catalog):
    ws = my_workspace
    t = f"{ws.schema}.accounts"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, balance bigint NOT NULL, version int NOT NULL)")
    ws.sql(f"INSERT INTO {t} SELECT seq, 1000, 0 FROM seq_1_to_200")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("accounts")

    done = threading.Event()
    committed = []
    errors = []

    def writer():
        try:
            rng = random.Random(7)
            conn = my_connect(ws.schema, autocommit=False)
            cur = conn.cursor()
            for i in range(600):
                a, b = rng.sample(range(1, 260), 2)
                cur.execute(f"UPDATE {t} SET balance = balance - 1, version = version + 1 WHERE id = %s", (a,))
                cur.execute(f"INSERT INTO {t} VALUES (%s, 1, 0) ON DUPLICATE KEY UPDATE version = version + 1", (b,))
                if i % 7 == 0:
                    cur.execute(f"DELETE FROM {t} WHERE id = %s", (rng.randrange(1, 260),))
                conn.commit()
                committed.append(i)
                time.sleep(0.002)
            conn.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    w = threading.Thread(target=writer)
    w.start()
    wait_until(lambda: len(committed) >= 150 or done.is_set(), None, "the write burst to get going")
    assert not errors, errors
    ws.stop_service(signal.SIGKILL)  # in the middle of the burst
    wait_until(lambda: len(committed) >= 300 or done.is_set(), None, "more writes while the service is down")
    ws.start_service()
    w.join(timeout=DEADLINE_S)
    assert done.is_set() and not errors, errors
    ws.wait_caught_up("accounts")

    assert spark_rows(spark, my_catalog, t) == normalized(ws.sql(f"SELECT * FROM {t}"))

    # No version was written twice: (key, seq) is unique across all deltas.
    from htap.conf import load_config

    cfg = load_config(ws.config)
    with live_delta_files(cfg, ws.table("accounts").id) as deltas:  # compaction runs meanwhile
        files = [str(cfg.warehouse / d.path) for d in deltas]
        ((total, distinct),) = duckdb.sql(
            f"SELECT count(*), count(DISTINCT (id, _seq)) FROM read_parquet({json.dumps(files)})"
        ).fetchall()
    assert total == distinct
    assert "checkpoint" in ws.log()


def test_stream_resumes_exactly_after_a_seq_and_progresses_when_idle(my_workspace):
    """At the ChangeSource level: from any commit's seq the stream delivers exactly the later commits."""
    import dataclasses

    from htap.conf import load_config
    from htap.connectors.changes import Begin, Commit, Progress, RowChange
    from htap.connectors.mysql.source import MySQLSource

    ws = my_workspace
    t = f"{ws.schema}.r"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
    ws.htap("tables", "add", t)
    source = MySQLSource(load_config(ws.config).source())
    table = ws.table("r")
    table = dataclasses.replace(table, copy_seq=master_seq(ws.conn))
    ws.sql(f"INSERT INTO {t} VALUES (1, 1)")
    ws.sql(f"INSERT INTO {t} VALUES (2, 2), (3, 3)")
    ws.sql("FLUSH BINARY LOGS")  # the next commits are in the next binlog file
    ws.sql(f"UPDATE {t} SET v = v + 10")
    ws.sql(f"DELETE FROM {t} WHERE id = 2")
    end = master_seq(ws.conn)

    def read(from_seq, until, write_elsewhere=None):
        txns, progress, high = [], [], 0
        with source.stream(from_seq, [table]) as stream:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and high < until:
                ev = stream.poll(0.2)
                if isinstance(ev, Begin):
                    txns.append([ev.seq])
                elif isinstance(ev, RowChange):
                    txns[-1].append((ev.op, ev.values))
                elif isinstance(ev, Commit):
                    assert ev.seq == txns[-1][0]
                    high = max(high, ev.seq)
                elif isinstance(ev, Progress):
                    progress.append(ev.seq)
                    high = max(high, ev.seq)
                if write_elsewhere and high >= end:
                    until = write_elsewhere()
                    write_elsewhere = None
        assert high >= until, "the stream did not reach the server's position"
        return txns, progress

    def elsewhere():
        # A commit to a table that is no HTAP table: the safe seq must still move past it.
        ws.sql(f"CREATE TABLE {ws.schema}.other (id int PRIMARY KEY)")
        ws.sql(f"INSERT INTO {ws.schema}.other VALUES (1)")
        return master_seq(ws.conn)

    everything, progress = read(0, end, elsewhere)
    assert [len(tx) - 1 for tx in everything] == [1, 2, 3, 1]
    seqs = [tx[0] for tx in everything]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4 and seqs[-1] <= end
    assert seqs[2] >> 32 == (seqs[1] >> 32) + 1  # file index in the high bits
    assert progress and max(progress) > end  # Progress past the other table's commits
    for k, seq in enumerate(seqs):
        later, _ = read(seq, end)
        assert later == everything[k + 1:], f"resuming after commit {k}"


def test_alter_table_mid_stream_is_followed(my_workspace, spark, my_catalog):
    """ADD COLUMN (no default) and DROP COLUMN are metadata-only; Spark keeps equal to MariaDB."""
    ws = my_workspace
    t = f"{ws.schema}.evolving"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
    ws.sql(f"INSERT INTO {t} VALUES (1, 1)")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("evolving")
    ws.sql(f"INSERT INTO {t} VALUES (2, 2)")
    ws.wait_caught_up("evolving")
    assert spark_rows(spark, my_catalog, t) == [(1, 1), (2, 2)]
    ws.sql(f"ALTER TABLE {t} ADD COLUMN note varchar(10)")
    ws.sql(f"INSERT INTO {t} VALUES (3, 3, 'x')")
    ws.wait_caught_up("evolving")
    info = ws.table("evolving")
    assert info.state == "streaming" and info.schema_version == 2, info
    assert spark_rows(spark, my_catalog, t) == [(1, 1, None), (2, 2, None), (3, 3, "x")]
    ws.sql(f"ALTER TABLE {t} DROP COLUMN v")
    ws.sql(f"UPDATE {t} SET note = 'y' WHERE id = 1")
    ws.wait_caught_up("evolving")
    assert spark_rows(spark, my_catalog, t) == [(1, "y"), (2, None), (3, "x")]


def test_bad_input_fails_with_one_actionable_line(my_workspace, tmp_path):
    ws = my_workspace
    ws.sql(f"CREATE TABLE {ws.schema}.nokey (a int, b text)")
    r = ws.htap("tables", "add", f"{ws.schema}.nokey", check=False)
    assert r.returncode == 2 and "no primary key" in r.stderr and "ADD PRIMARY KEY" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    r = ws.htap("tables", "add", f"{ws.schema}.missing", check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr

    ws.sql(f"CREATE TABLE {ws.schema}.shapes (id int PRIMARY KEY, p point)")
    r = ws.htap("tables", "add", f"{ws.schema}.shapes", check=False)
    assert r.returncode == 2 and "'point' is not supported" in r.stderr

    ws.sql(f"CREATE TABLE {ws.schema}.heap (id int PRIMARY KEY) ENGINE=MyISAM")
    r = ws.htap("tables", "add", f"{ws.schema}.heap", check=False)
    assert r.returncode == 2 and "ENGINE=InnoDB" in r.stderr

    import subprocess

    from conftest import HTAP

    bad = subprocess.run(
        [*HTAP, "--config", str(tmp_path / "bad.toml"), "init", "--kind", "mysql", "--dsn",
         f"mysql://{my_server().user}:wrong-password@{my_server().host}:{my_server().port}/test"],
        capture_output=True, text=True,
    )
    assert bad.returncode == 2 and "cannot connect to MySQL" in bad.stderr and "Access denied" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1

    bad = subprocess.run(
        [*HTAP, "--config", str(tmp_path / "bad2.toml"), "init", "--kind", "mysql", "--dsn", "postgres://x@y/z"],
        capture_output=True, text=True,
    )
    assert bad.returncode == 2 and "mysql://user:password@host:3306/database" in bad.stderr


def test_config_keys_are_checked_per_kind(tmp_path):
    from htap.conf import load_config
    from htap.errors import ConfigError

    p = tmp_path / "htap.toml"
    p.write_text('[sources.m]\nkind = "mysql"\nhost = "db"\nuser = "u"\nslot = "x"\n')
    with pytest.raises(ConfigError, match=r"sources\.m\.slot does not apply to kind 'mysql'"):
        load_config(p)
    p.write_text('[sources.m]\nkind = "mysql"\nhots = "db"\n')
    with pytest.raises(ConfigError, match=r"unknown config key 'sources\.m\.hots'.*'sources\.m\.host'"):
        load_config(p)
    p.write_text('[sources.m]\nkind = "mysql"\ndsn = "mysql://a:b%40c@db:3307/shop"\nport = 3308\nserver_id = 77\n')
    src = load_config(p).source()
    assert (src.user, src.password, src.host, src.port, src.database, src.server_id) == ("a", "b@c", "db", 3308, "shop", 77)
    p.write_text('[sources.m]\nkind = "mysql"\nhost = "db"\n')
    with pytest.raises(ConfigError, match="user is required"):
        load_config(p)


def test_check_messages_against_the_real_servers_settings(mysql):
    from htap.connectors.mysql.server import (
        binlog_settings,
        check_cdc_ready,
        privilege_problem,
        privileges,
        settings_problem,
    )
    from htap.errors import SourceError

    real = binlog_settings(mysql)
    assert settings_problem(real) is None  # this server is set up for CDC
    check_cdc_ready(mysql)
    msg = settings_problem({**real, "log_bin": "OFF"})
    assert "log_bin=OFF" in msg and "my.cnf" in msg
    msg = settings_problem({**real, "binlog_format": "MIXED"})
    assert "'MIXED'" in msg and "SET GLOBAL binlog_format = 'ROW'" in msg
    msg = settings_problem({**real, "binlog_row_image": "MINIMAL"})
    assert "'MINIMAL'" in msg and "binlog_row_image = 'FULL'" in msg

    user, privs = privileges(mysql)
    assert privilege_problem(user, privs) is None

    # A real user without replication privileges.
    name = "htap_noperm_" + str(int(time.time() * 1000) % 10**8)
    with mysql.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON test.* TO '{name}'@'%'")
    try:
        conn = pymysql.connect(host=my_server().host, port=my_server().port, user=name, password="pw", database="test", autocommit=True)
        try:
            with pytest.raises(SourceError, match=r"lacks REPLICATION SLAVE and REPLICATION CLIENT.*GRANT REPLICATION SLAVE"):
                check_cdc_ready(conn)
        finally:
            conn.close()
    finally:
        with mysql.cursor() as cur:
            cur.execute(f"DROP USER '{name}'@'%'")


def test_sigkill_during_the_initial_copy_then_restart(my_workspace, spark, my_catalog):
    ws = my_workspace
    t = f"{ws.schema}.big"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v bigint, s varchar(20))")
    ws.sql(f"INSERT INTO {t} SELECT seq, seq * 3, concat('row ', seq) FROM seq_1_to_400000")
    ws.htap("tables", "add", t)
    ws.start_service()
    wait_until(lambda: ws.table("big").state == "copying", None, "the initial copy to start")
    ws.stop_service(signal.SIGKILL)
    ws.sql(f"UPDATE {t} SET v = -v WHERE id % 1000 = 0")  # while the service is down
    ws.sql(f"DELETE FROM {t} WHERE id > 399000")
    ws.start_service()
    ws.wait_readable("big")
    ws.sql(f"INSERT INTO {t} VALUES (500000, 1, 'after')")
    ws.wait_caught_up("big")
    query = "SELECT count(*), sum(v), count(DISTINCT s), min(id), max(id) FROM {}"
    got = spark.sql(query.format(f"{my_catalog}.{t}")).collect()
    assert normalized(got) == normalized(ws.sql(query.format(t)))
