"""Where a trivial query's time goes (issue 12 item 5, per-scan overhead).

    python -m bench.overhead [--rows 1000] [--rounds 5]

A private Postgres (bench/.work/overhead/pg) holds two small tables, `htap serve` replicates
them, and one local Spark session runs three trivial queries through the HTAP catalog
(`count(*)`, a point lookup by key, a 2-table join), next to two baselines run in the same
process over the same delta files: DuckDB directly, and Spark over the Parquet files. Each HTAP
query is split into Spark's phases (analysis: loadTable; planning: the scan's Python planning;
execution: the tasks), and the pieces behind them are timed on their own: a Python process
with our imports, the catalog bridge (a subprocess per call vs the driver's bridge daemon),
config parsing, the metadata transactions of a scan, DuckDB, Parquet footers, a Python task.
Prints the breakdown with ratios against the baselines, and writes
bench/results/overhead.json. Figures are medians of --rounds runs; state the machine's load
(printed) when you quote them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

PORT = 54341
SOURCE = "ovh"
QUERIES = {
    "count(*)": "SELECT count(*) FROM {t}",
    "point lookup": "SELECT * FROM {t} WHERE id = 5",
    "2-table join": "SELECT count(*), sum(u.w) FROM {t} JOIN {u} ON t.id = u.t_id",
}


def median_s(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def progress(msg: str) -> None:
    print(f"[bench.overhead] {msg}", file=sys.stderr, flush=True)


def setup(work: Path, rows: int) -> tuple[str, Path, subprocess.Popen]:
    """Postgres with public.t and public.u, an htap config, and `htap serve` replicating them."""
    import psycopg2

    from htap import localpg
    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    dsn = localpg.start(work / "pg", PORT, wal_level="logical")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS public.t, public.u")
        cur.execute("CREATE TABLE public.t (id int PRIMARY KEY, v int NOT NULL, s text)")
        cur.execute(f"INSERT INTO public.t SELECT g, g % 7, 's' || g FROM generate_series(1, {rows}) g")
        cur.execute("CREATE TABLE public.u (id int PRIMARY KEY, t_id int NOT NULL, w int NOT NULL)")
        cur.execute(f"INSERT INTO public.u SELECT g, (g % {rows}) + 1, g FROM generate_series(1, {rows}) g")
    conn.close()
    config = work / "htap.toml"
    htap = [sys.executable, "-m", "htap.app.cli", "--config", str(config)]
    subprocess.run([*htap, "init", "--dsn", dsn, "--source", SOURCE, "--force"], check=True, capture_output=True)
    for table in ("public.t", "public.u"):
        subprocess.run([*htap, "tables", "add", table], check=True, capture_output=True)
    log = open(work / "serve.log", "ab")
    service = subprocess.Popen([*htap, "serve"], stdout=log, stderr=log)
    deadline = time.monotonic() + 300
    cfg = load_config(config)
    while True:
        with MetadataStore(cfg.metadata) as store:
            if all(store.get_table(SOURCE, "public", n).readable for n in ("t", "u")):
                break
        if time.monotonic() > deadline or service.poll() is not None:
            raise SystemExit(f"the tables did not become readable; see {work / 'serve.log'}")
        time.sleep(0.2)
    return dsn, config, service


def delta_files(config: Path) -> dict[str, list[str]]:
    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    cfg = load_config(config)
    with MetadataStore(cfg.metadata) as store:
        return {n: [str(Path(cfg.warehouse) / d.path) for d in store.deltas(store.get_table(SOURCE, "public", n).id)]
                for n in ("t", "u")}


def subprocess_s(args: list[str], rounds: int) -> float:
    return median_s(lambda: subprocess.run(args, check=True, capture_output=True), rounds)


def components(config: Path, files: dict[str, list[str]], rounds: int) -> dict[str, float]:
    """The pieces behind a scan, each timed alone (seconds, medians)."""
    import duckdb
    import pyarrow.parquet as pq

    from htap.conf import load_config
    from htap.pushdown.datasource import HtapDataSource, HtapReader, ScanOptions
    from htap.replica.metadata import MetadataStore

    py = sys.executable
    out: dict[str, float] = {}
    out["python start, no imports"] = subprocess_s([py, "-c", "pass"], rounds)
    out["python start + import pyspark_htap (any Spark Python worker)"] = subprocess_s([py, "-c", "import pyspark_htap"], rounds)
    out["python start + planner imports"] = subprocess_s(
        [py, "-c", "import pyspark_htap, htap.pushdown.planning, htap.pushdown.source_reader, htap.replica.warehouse"], rounds)
    out["python start + reader imports"] = subprocess_s([py, "-c", "import pyspark_htap, htap.pushdown.replica_reader"], rounds)
    out["bridge call as a subprocess (list-tables)"] = subprocess_s(
        [py, "-m", "htap.catalog.bridge", "--config", str(config), "--source", SOURCE, "list-tables"], rounds)
    out["load_config"] = median_s(lambda: load_config(config), rounds * 4)
    cfg = load_config(config)

    def store_get() -> None:
        with MetadataStore(cfg.metadata) as store:
            store.get_table(SOURCE, "public", "t")

    out["metadata store open + get_table"] = median_s(store_get, rounds * 4)
    options = {"config": str(config), "source": SOURCE, "table": "public.t"}
    out["inferSchema's Python work (HtapDataSource.schema)"] = median_s(
        lambda: HtapDataSource(options).schema(), rounds * 2)
    from pyspark.sql.types import IntegerType, StructField, StructType

    schema = StructType([StructField("id", IntegerType())])
    pushed = json.dumps({"columns": ["id"]})
    out["planning's Python work (HtapReader: route, snapshot, pin, record)"] = median_s(
        lambda: HtapReader(ScanOptions.parse({**options, "pushed": pushed}), schema), rounds * 2)
    out["duckdb.connect + SET TimeZone"] = median_s(lambda: duckdb.connect().execute("SET TimeZone = 'UTC'"), rounds * 2)
    out["Parquet footers of t's deltas"] = median_s(lambda: [pq.read_metadata(f) for f in files["t"]], rounds * 4)
    reader = HtapReader(ScanOptions.parse({**options, "pushed": pushed}), schema)
    parts = reader.partitions()
    out["a task's Python read of t (in process)"] = median_s(lambda: [list(reader.read(p)) for p in parts], rounds * 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "overhead")
    p.add_argument("--idle", type=float, default=70,
                   help="seconds without queries before the cold point lookup (Spark ends Python workers idle 60 s); 0: skip")
    args = p.parse_args()

    import duckdb

    from htap import localpg
    from htap.catalog.shim import spark_session

    if (args.work / "pg").exists():
        localpg.stop(args.work / "pg")  # a previous run's, if it was interrupted
    shutil.rmtree(args.work, ignore_errors=True)  # its replication slot and metadata too
    args.work.mkdir(parents=True)
    progress("starting Postgres and htap serve")
    _dsn, config, service = setup(args.work, args.rows)
    try:
        files = delta_files(config)
        progress("timing the pieces")
        parts = components(config, files, args.rounds)
        progress("starting Spark")
        spark = spark_session("ovh", config, SOURCE, **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        # The baselines read the same files (a fresh copy: inserts only, nothing to merge) without
        # the replica's own columns (_seq, _op, ...).
        con = duckdb.connect()
        for n, fs in files.items():
            df = spark.read.parquet(*fs)
            df.select([c for c in df.columns if not c.startswith("_")]).createOrReplaceTempView(f"p_{n}")
            columns = ", ".join(c for c in df.columns if not c.startswith("_"))
            con.execute(f"CREATE VIEW {n} AS SELECT {columns} FROM read_parquet({fs!r})")

        def htap_phases(sql: str) -> dict[str, float]:
            t0 = time.perf_counter()
            df = spark.sql(sql)  # analysis: the catalog's loadTable per table
            t1 = time.perf_counter()
            # optimizer and physical planning: the scans' Python planning too when Spark asks
            # for their partitions here (else it runs at execution)
            df._jdf.queryExecution().executedPlan()
            t2 = time.perf_counter()
            df.collect()  # the tasks
            t3 = time.perf_counter()
            return {"analysis (loadTable)": t1 - t0, "planning": t2 - t1, "execution": t3 - t2, "total": t3 - t0}

        def spark_task() -> None:
            spark.sparkContext.parallelize([1], 1).map(lambda x: x).collect()

        queries = {}
        for label, q in QUERIES.items():
            htap_sql = q.format(t="ovh.public.t t", u="ovh.public.u u")
            htap_phases(htap_sql)  # warm: workers started, jar classes loaded
            answers = {
                "htap": sorted(map(tuple, spark.sql(htap_sql).collect())),
                "spark over Parquet": sorted(map(tuple, spark.sql(q.format(t="p_t t", u="p_u u")).collect())),
                "duckdb": sorted(con.execute(q.format(t="t", u="u")).fetchall()),
            }
            if len({repr(a) for a in answers.values()}) != 1:
                raise SystemExit(f"{label}: the systems disagree: {answers}")
            runs = [htap_phases(htap_sql) for _ in range(args.rounds)]
            phases = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            spark_parquet = median_s(lambda: spark.sql(q.format(t="p_t t", u="p_u u")).collect(), args.rounds)
            duck = median_s(lambda: con.execute(q.format(t="t", u="u")).fetchall(), args.rounds * 4)
            queries[label] = {
                **{f"htap {k} s": round(v, 4) for k, v in phases.items()},
                "spark over Parquet s": round(spark_parquet, 4),
                "duckdb over the deltas s": round(duck, 5),
                "htap / spark-parquet": round(phases["total"] / spark_parquet, 2),
                "htap / duckdb": round(phases["total"] / duck, 1),
            }
        by_format = spark.read.format("htap").option("config", str(config)).option("source", SOURCE)
        spark_side = {
            "SHOW TABLES through the catalog (one bridge call)": median_s(
                lambda: spark.sql("SHOW TABLES IN ovh.public").collect(), args.rounds),
            "loadTable through the catalog (spark.table(t).schema)": median_s(
                lambda: spark.table("ovh.public.t").schema, args.rounds),
            "inferSchema in a Python planning worker (format('htap').load().schema)": median_s(
                lambda: by_format.option("table", "public.t").load().schema, args.rounds),
            "one Python task (parallelize.map.collect)": median_s(spark_task, args.rounds),
        }
        if args.idle:
            progress(f"{args.idle:.0f} s without queries, then one point lookup")
            time.sleep(args.idle)
            cold = htap_phases(QUERIES["point lookup"].format(t="ovh.public.t t"))
            queries["point lookup after idle (new Python workers)"] = {f"htap {k} s": round(v, 4) for k, v in cold.items()}
        spark.stop()
    finally:
        service.terminate()
        service.wait(timeout=60)
        localpg.stop(args.work / "pg")
    result = {
        "rows": args.rows, "rounds": args.rounds, "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(), "queries": queries,
        "pieces s": {k: round(v, 4) for k, v in {**parts, **spark_side}.items()},
    }
    out = Path(__file__).parent / "results" / "overhead.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
