"""The driver's catalog bridge (Bridge.java): one long-lived `python -m htap.catalog.bridge
--serve` process per driver answers SHOW TABLES, ALTER TABLE ... SET TBLPROPERTIES and the
lease and damage calls. It answers, survives a failing call, is started again after a `kill -9`,
and a hung call times out with a message naming the cause and the setting."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import wait_until


def bridge_pids(spark) -> list[int]:
    """The bridge processes the driver JVM started (its children running `--serve`)."""
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == jvm and b"htap.catalog.bridge" in cmdline and b"--serve" in cmdline and " Z " not in stat:
            pids.append(int(proc.name))
    return pids


def the_bridge(spark) -> int:
    return wait_until(lambda: len(bridge_pids(spark)) == 1 and bridge_pids(spark)[0], 60, "one bridge process")


@pytest.fixture
def table(workspace):
    ws = workspace
    ws.sql(f"CREATE TABLE {ws.schema}.t (id int PRIMARY KEY, v text)")
    ws.htap("tables", "add", f"{ws.schema}.t")
    return f"{ws.schema}.t"


def show(spark, catalog, schema) -> set[str]:
    return {r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.{schema}").collect()}


def test_one_process_answers_survives_errors_and_restarts_after_kill(workspace, spark, catalog, table):
    ws = workspace
    assert show(spark, catalog, ws.schema) == {"t"}
    pid = the_bridge(spark)

    with pytest.raises(Exception, match="htap.failover takes 'true' or 'false'"):
        spark.sql(f"ALTER TABLE {catalog}.{table} SET TBLPROPERTIES ('htap.failover' = 'maybe')")
    with pytest.raises(Exception, match="unknown table property 'htap.nope'"):
        spark.sql(f"ALTER TABLE {catalog}.{table} SET TBLPROPERTIES ('htap.nope' = '1')")
    spark.sql(f"ALTER TABLE {catalog}.{table} SET TBLPROPERTIES ('htap.failover' = 'true')")
    assert ws.table("t").failover
    assert the_bridge(spark) == pid  # the same process answered all of it

    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: pid not in bridge_pids(spark), 30, "the killed bridge to go")
    assert show(spark, catalog, ws.schema) == {"t"}  # started again on the next call
    assert the_bridge(spark) != pid
    spark.sql(f"ALTER TABLE {catalog}.{table} SET TBLPROPERTIES ('htap.failover' = 'false')")
    assert not ws.table("t").failover


def test_a_hung_call_times_out_clearly_and_the_next_call_works(workspace, spark, catalog, table):
    ws = workspace
    assert show(spark, catalog, ws.schema) == {"t"}
    pid = the_bridge(spark)
    time.sleep(1)  # let lease calls of earlier queries finish: this test's call must be the one that hangs
    spark.conf.set("spark.htap.bridge.timeoutSeconds", "3")
    os.kill(pid, signal.SIGSTOP)  # the process hangs as it would on a locked metadata store
    try:
        with pytest.raises(Exception, match=r"timed out after 3.0 s.*spark.htap.bridge.timeoutSeconds"):
            show(spark, catalog, ws.schema)
        wait_until(lambda: pid not in bridge_pids(spark), 30, "the hung bridge to be killed")
    finally:
        spark.conf.unset("spark.htap.bridge.timeoutSeconds")
        if pid in bridge_pids(spark):
            os.kill(pid, signal.SIGKILL)
    assert show(spark, catalog, ws.schema) == {"t"}
    assert the_bridge(spark) != pid
