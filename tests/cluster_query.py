"""Run queries through the HTAP catalog on a Spark `local-cluster[2,1,1024]` (a master, two
workers and their executors as separate JVMs with their own Python workers, started from the
pyspark wheel) and print each result as JSON lines. Used by tests/test_object_store.py: Spark
gets a session of its own here because one process holds one SparkContext.

  python tests/cluster_query.py CONFIG CATALOG QUERY [QUERY ...]
"""

from __future__ import annotations

import json
import os
import sys
import time

from htap.catalog.shim import spark_session

EXECUTOR_CACHE_ENV = "HTAP_TEST_EXECUTOR_CACHE"


def main(config: str, catalog: str, queries: list[str]) -> None:
    os.environ["TZ"] = "UTC"
    conf = {"spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "2"}
    if os.environ.get(EXECUTOR_CACHE_ENV):  # the executors' own cache folder (HTAP_CACHE_DIR on them only)
        conf["spark.executorEnv.HTAP_CACHE_DIR"] = os.environ[EXECUTOR_CACHE_ENV]
    spark = spark_session(catalog, config, master="local-cluster[2,1,1024]", **conf)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        deadline = time.monotonic() + 300
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the workers' executors register after the session starts
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # without the driver
        print(json.dumps({"executors": executors}))
        for q in queries:
            rows = [list(r) for r in spark.sql(q).collect()]
            print(json.dumps({"query": q, "rows": rows}, default=str))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
