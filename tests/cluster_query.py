"""Run queries through the HTAP catalog on a Spark `local-cluster[2,1,1024]` (a master, two
workers and their executors as separate JVMs with their own Python workers, started from the
pyspark wheel) and print each result as JSON lines. Used by tests/test_object_store.py and
tests/test_cluster_tpch.py: Spark gets a session of its own here because one process holds one
SparkContext.

  python tests/cluster_query.py CONFIG CATALOG QUERY [QUERY ...]
  python tests/cluster_query.py CONFIG CATALOG --serve

With --serve the session stays up (starting two executors costs minutes on a loaded machine)
and answers one JSON line per statement read from standard input, {"sql": ...}, with
{"rows": <base64 pickle of the rows as tuples>} or {"error": ...}, so a test can kill and
restart `htap serve` between queries of one cluster session. An empty line ends it.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
import time

from htap.catalog.shim import spark_session

EXECUTOR_CACHE_ENV = "HTAP_TEST_EXECUTOR_CACHE"


def serve(spark) -> None:
    for line in sys.stdin:
        if not line.strip():
            return
        sql = json.loads(line)["sql"]
        try:
            rows = [tuple(r) for r in spark.sql(sql).collect()]
            reply = {"rows": base64.b64encode(pickle.dumps(rows)).decode()}
        except Exception as e:  # noqa: BLE001 - the test reports what failed
            reply = {"error": f"{type(e).__name__}: {str(e)[:4000]}"}
        print(json.dumps(reply), flush=True)


def main(config: str, catalog: str, queries: list[str]) -> None:
    os.environ["TZ"] = "UTC"
    # spark.executor.cores: each of local-cluster[2,1,1024]'s executors has one core (unset, the
    # split rules would guess this machine's cores for one task: io.sparkhtap.JoinedTables.cores)
    conf = {"spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false", "spark.executor.cores": "1"}
    if os.environ.get(EXECUTOR_CACHE_ENV):  # the executors' own cache folder (HTAP_CACHE_DIR on them only)
        conf["spark.executorEnv.HTAP_CACHE_DIR"] = os.environ[EXECUTOR_CACHE_ENV]
    spark = spark_session(catalog, config, master="local-cluster[2,1,1024]", **conf)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        deadline = time.monotonic() + 300
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the workers' executors register after the session starts
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # without the driver
        print(json.dumps({"executors": executors}), flush=True)
        if queries == ["--serve"]:
            serve(spark)
            return
        for q in queries:
            rows = [list(r) for r in spark.sql(q).collect()]
            print(json.dumps({"query": q, "rows": rows}, default=str))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
