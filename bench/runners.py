"""The three ways to run the queries, one Spark session, and the measurements around them.

(a) `htap`:    spark-htap's replica, through the catalog shim (`htap_tpch.tpch.<table>`), kept
               fresh by `htap serve` running as a subprocess for the whole benchmark.
(b) `jdbc`:    Spark's JDBCTableCatalog on the same Postgres (`pg.tpch.<table> WITH (...)`), with
               aggregate, limit/top-N, offset and table-sample pushdown on and partitioned reads
               by the first key column (per-table scan options in the query's WITH clause).
(c) `parquet`: Spark over a static Parquet copy of the tables (temp views).
(d) `duckdb`:  DuckDB itself over the same Parquet copy, no Spark at all: the ceiling on this
               machine (what one vectorized engine does with the query and the files).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2.extensions

from bench import data
from bench.data import log
from bench.queries import query_text

SYSTEMS = ("htap", "jdbc", "jdbc-join", "parquet", "duckdb")  # jdbc-join: JDBC with Spark's join pushdown on
JOIN_PUSHDOWN = "spark.sql.optimizer.datasourceV2JoinPushdown"
HTAP_CATALOG = "htap_tpch"
HTAP_SOURCE = "bench_tpch"  # slot and publication: htap_bench_tpch
JDBC_CATALOG = "pg"
PG_JDBC_JAR = Path("/usr/share/java/postgresql.jar")
PG_JDBC_HINT = "the PostgreSQL JDBC driver is missing: apt-get install -y libpostgresql-jdbc-java (Debian)"


# --- Postgres server CPU ------------------------------------------------------------------------


def postmaster_pid(dsn: str) -> int | None:
    """PID of the server behind `dsn` when it runs on this machine (the parent of our backend)."""
    conn = data.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        ppid = int(_stat_fields(backend)[1])
        return ppid if _comm(ppid) == "postgres" else None
    except (OSError, IndexError, ValueError):
        return None  # a remote server: its CPU cannot be read here
    finally:
        conn.close()


def _stat(pid: int | str) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().decode("ascii", "replace")


def _comm(pid: int | str) -> str:
    stat = _stat(pid)
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def _stat_fields(pid: int | str) -> list[str]:
    """The fields after `(comm)`: [state, ppid, ..., utime at 11, stime, cutime, cstime at 14, ...]."""
    stat = _stat(pid)
    return stat[stat.rindex(")") + 2 :].split()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds a process used so far (0 when it is not on this machine)."""
    try:
        fields = _stat_fields(pid)
    except (OSError, ValueError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of process `root` and every process under it, reaped children included
    (utime stime cutime cstime): less sensitive to other load on the machine than wall time."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                fields = _stat_fields(pid)
            except (OSError, ValueError):
                continue  # exited meanwhile
            stats[int(pid)] = fields
            children.setdefault(int(fields[1]), []).append(int(pid))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += sum(int(x) for x in stats[pid][11:15])
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU seconds used so far by one Postgres server (its postmaster and children), from /proc.

    utime + stime of the live processes, plus cutime + cstime (the CPU of exited children the
    postmaster has reaped, e.g. backends of closed connections), so the difference of two
    readings counts backends that came and went in between. Other Postgres servers on the machine
    are not counted; None when the server is not local.
    """
    if postmaster is None:
        return None
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if _comm(pid) != "postgres":
                continue
            fields = _stat_fields(pid)
        except (OSError, ValueError):
            continue  # exited meanwhile
        if int(pid) == postmaster or int(fields[1]) == postmaster:
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime (stat fields 14-17)
    return total / os.sysconf("SC_CLK_TCK")


# --- the spark-htap replica -----------------------------------------------------------------------


class Replica:
    """A fresh spark-htap workspace under `work_dir`, with `htap serve` running as a subprocess."""

    def __init__(self, work_dir: Path, dsn: str, tables: tuple[str, ...] = data.TABLE_NAMES):
        self.tables = tables  # the TPC-H tables it replicates (default: all)
        self.dir = work_dir
        self.dsn = dsn
        self.config = work_dir / "htap.toml"
        self.log_path = work_dir / "serve.log"
        self.slot = self.publication = f"htap_{HTAP_SOURCE}"
        self.proc: subprocess.Popen | None = None
        self.copy_s: float | None = None

    def htap(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "htap.app.cli", "--config", str(self.config), *args]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"`htap {' '.join(args)}` failed:\n{result.stdout}{result.stderr}")

    def drop_slot_and_publication(self) -> None:
        conn = data.connect(self.dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
                row = cur.fetchone()
                if row and row[0]:
                    raise RuntimeError(f"replication slot {self.slot} is in use: is another benchmark running?")
                if row:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                cur.execute(f"DROP PUBLICATION IF EXISTS {self.publication}")
        finally:
            conn.close()

    def start(self, timeout_s: float) -> None:
        """init + tables add + serve, then wait until every table is readable (the initial copy)."""
        from htap.conf import load_config
        from htap.replica.metadata import MetadataStore

        self.drop_slot_and_publication()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        log(f"spark-htap: new workspace {self.dir}")
        self.htap("init", "--dsn", self.dsn, "--source", HTAP_SOURCE, "--force")
        for t in self.tables:
            self.htap("tables", "add", f"{data.SCHEMA}.{t}")
        started = time.monotonic()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "htap.app.cli", "--config", str(self.config), "serve"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        log(f"spark-htap: `htap serve` started (pid {self.proc.pid}, log {self.log_path}); waiting for the initial copy")
        cfg = load_config(self.config)
        store = MetadataStore(cfg.metadata)
        next_report = started + 15
        try:
            while True:
                tables = {t.name: t for t in store.list_tables(HTAP_SOURCE)}
                if all(t.readable for t in tables.values()) and len(tables) == len(self.tables):
                    break
                bad = [f"{t.name}: {t.error}" for t in tables.values() if t.state in ("unhealthy", "failed")]
                if bad:
                    raise RuntimeError(f"replica table(s) unhealthy or failed: {'; '.join(bad)} (see {self.log_path})")
                if self.proc.poll() is not None:
                    raise RuntimeError(f"`htap serve` exited with code {self.proc.returncode}:\n{self.log_tail()}")
                now = time.monotonic()
                if now > started + timeout_s:
                    raise RuntimeError(f"initial copy not done after {timeout_s:.0f} s:\n{self.log_tail()}")
                if now >= next_report:
                    next_report = now + 15
                    states = ", ".join(f"{n}={t.state}" for n, t in sorted(tables.items()))
                    log(f"  copying for {now - started:.0f} s: {states}")
                time.sleep(0.5)
        finally:
            store.close()
        self.copy_s = time.monotonic() - started
        log(f"spark-htap: all {len(self.tables)} tables readable after {self.copy_s:.1f} s")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, drop_slot: bool) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if drop_slot:
            # A slot nobody reads would keep Postgres' WAL forever: leave nothing behind.
            self.drop_slot_and_publication()


# --- the Spark session ----------------------------------------------------------------------------


@dataclass
class JdbcSettings:
    url: str
    user: str | None
    password: str | None
    partitions: int
    fetch_size: int
    join_pushdown: bool

    @classmethod
    def from_dsn(cls, dsn: str, partitions: int, fetch_size: int, join_pushdown: bool) -> "JdbcSettings":
        p = psycopg2.extensions.parse_dsn(dsn)
        url = f"jdbc:postgresql://{p.get('host', 'localhost')}:{p.get('port', '5432')}/{p.get('dbname', p.get('user', 'postgres'))}"
        return cls(url, p.get("user"), p.get("password"), partitions, fetch_size, join_pushdown)

    def catalog_conf(self) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{JDBC_CATALOG}"
        conf = {
            prefix: "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
            f"{prefix}.url": self.url,
            f"{prefix}.driver": "org.postgresql.Driver",
            f"{prefix}.pushDownPredicate": "true",
            f"{prefix}.pushDownAggregate": "true",
            f"{prefix}.pushDownLimit": "true",  # also enables top-N (ORDER BY ... LIMIT) pushdown
            f"{prefix}.pushDownOffset": "true",
            f"{prefix}.pushDownTableSample": "true",
            f"{prefix}.pushDownJoin": "true",  # used only if spark.sql.optimizer.datasourceV2JoinPushdown
            f"{prefix}.fetchsize": str(self.fetch_size),
        }
        if self.user:
            conf[f"{prefix}.user"] = self.user
        if self.password:
            conf[f"{prefix}.password"] = self.password
        return conf


def spark_session(htap_config: Path, jdbc: JdbcSettings, driver_memory: str, shuffle_partitions: int, need_jdbc: bool,
                  master: str = "local[2]", extra: dict[str, str] | None = None):
    """ONE session with both jars (spark.jars is fixed at start) and both catalogs, on `master`
    (local mode by default), `extra` settings last."""
    from pyspark.sql import SparkSession

    from htap.catalog.shim import shim_jar, spark_conf

    jars = [str(shim_jar())]
    if need_jdbc:
        if not PG_JDBC_JAR.is_file():
            raise SystemExit(f"error: {PG_JDBC_HINT}")
        jars.append(str(PG_JDBC_JAR))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {
        **spark_conf(HTAP_CATALOG, htap_config),
        # Read the replica or fail: never fall back to the source silently during the benchmark.
        f"spark.sql.catalog.{HTAP_CATALOG}.route": "replica",
        **jdbc.catalog_conf(),
        "spark.jars": ",".join(jars),
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.optimizer.datasourceV2JoinPushdown": str(jdbc.join_pushdown).lower(),
        **(extra or {}),
    }
    builder = SparkSession.builder.master(master).appName("spark-htap-bench-tpch")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, conf


def table_refs(system: str, bounds: dict[str, tuple[str, int, int]], jdbc: JdbcSettings) -> dict[str, str]:
    """How each system names each table in the query text."""
    if system == "htap":
        return {t: f"{HTAP_CATALOG}.{data.SCHEMA}.{t}" for t in data.TABLE_NAMES}
    if system == "parquet":
        return {t: f"parquet_{t}" for t in data.TABLE_NAMES}
    if system == "duckdb":
        return {t: f"duckdb_{t}" for t in data.TABLE_NAMES}
    refs = {}
    for t in data.TABLE_NAMES:
        col, lo, hi = bounds[t]
        ref = f"{JDBC_CATALOG}.{data.SCHEMA}.{t}"
        if jdbc.partitions > 1 and t not in ("nation", "region"):
            ref += (
                f" WITH ('partitionColumn' = '{col}', 'lowerBound' = '{lo}', 'upperBound' = '{hi + 1}',"
                f" 'numPartitions' = '{jdbc.partitions}')"
            )
        refs[t] = ref
    return refs


def htap_table_states(spark) -> list[dict] | str:
    """The replica's own view of its tables after the run (state, deltas, last routing decision)."""
    try:
        return [r.asDict() for r in spark.sql(f"SELECT * FROM {HTAP_CATALOG}.htap.tables").collect()]
    except Exception as e:  # noqa: BLE001 - informative only
        return f"error: {error_line(e)}"


def register_parquet(spark, files: dict[str, Path]) -> None:
    for t, path in files.items():
        spark.read.parquet(str(path.resolve())).createOrReplaceTempView(f"parquet_{t}")


# --- running queries ---------------------------------------------------------------------------------


@dataclass
class QueryRun:
    seconds: list[float] = field(default_factory=list)
    rows: list[tuple] | None = None
    schema: str | None = None
    error: str | None = None
    error_detail: str | None = None

    @property
    def best(self) -> float | None:
        return min(self.seconds) if self.seconds and self.error is None else None


@dataclass
class SystemRun:
    system: str
    queries: dict[int, QueryRun]
    table_rows: dict[str, int | str]
    pg_cpu_s: float  # Postgres server CPU seconds during this system's query runs
    wall_s: float
    loadavg: list[float]  # 1-minute load average before each query: other work on the machine

    @property
    def mean_loadavg(self) -> float:
        return sum(self.loadavg) / len(self.loadavg) if self.loadavg else 0.0


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Warning)?: \S")


def error_line(e: BaseException) -> str:
    """The one line of a Spark/Python error that says what went wrong."""
    text = str(e).strip()
    lines = text.splitlines()
    if "Traceback (most recent call last)" in text:
        # A Python worker failure: the traceback's own exception line (unindented) names the cause.
        start = max(i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line)
        for line in lines[start + 1 :]:
            if _EXC_LINE.match(line):
                return line.strip()[:500]
    for line in lines:
        line = line.strip().lstrip(":").strip()
        if line and not line.startswith("An error occurred while calling"):
            return line[:500]
    return type(e).__name__


def duckdb_connection(files: dict[str, Path], threads: int | None = None):
    """DuckDB with one view per table over the static Parquet copy (system (d))."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for t, path in files.items():
        con.execute(f"CREATE VIEW duckdb_{t} AS SELECT * FROM read_parquet('{str(path.resolve())}')")
    return con


def run_duckdb(con, text: str, timeout_s: float) -> tuple[float, list[tuple], str]:
    """Run one query in DuckDB to completion (rows fetched); interrupt it after `timeout_s`."""
    def body() -> tuple[list[tuple], str]:
        rel = con.sql(text)
        rows = [tuple(r) for r in rel.fetchall()]
        return rows, ", ".join(f"{n}:{t}" for n, t in zip(rel.columns, rel.types))

    return _timed(body, con.interrupt, timeout_s)


def run_one(spark, text: str, timeout_s: float) -> tuple[float, list[tuple], str]:
    """Run one query to completion (collected on the driver); cancel it after `timeout_s`."""
    def body() -> tuple[list[tuple], str]:
        df = spark.sql(text)
        return [tuple(r) for r in df.collect()], df.schema.simpleString()

    return _timed(body, spark.sparkContext.cancelAllJobs, timeout_s)


def _timed(body, cancel, timeout_s: float) -> tuple[float, list[tuple], str]:
    """(seconds, rows, schema) of `body()`; `cancel()` stops it after `timeout_s`, reported as a
    TimeoutError (not as whatever the cancelled engine raised)."""
    fired = threading.Event()

    def on_timeout() -> None:
        fired.set()
        cancel()

    timer = threading.Timer(timeout_s, on_timeout)
    timer.daemon = True
    started = time.perf_counter()
    timer.start()
    try:
        rows, schema = body()
    except Exception as e:
        if fired.is_set():
            raise TimeoutError(f"timeout: cancelled after {timeout_s:.0f} s") from e
        raise
    finally:
        timer.cancel()
    return time.perf_counter() - started, rows, schema


def warm_up(run_sql, system: str, refs: dict[str, str], sf: float) -> dict[str, int | str]:
    """count(*) of every table (also checks each is readable) and one untimed Q6 (a lineitem scan)."""
    log(f"[{system}] warm-up: count(*) of every table, Q6 once")
    counts: dict[str, int | str] = {}
    for t, ref in refs.items():
        try:
            counts[t] = run_sql(f"SELECT count(*) FROM {ref}")[0][0]
        except Exception as e:  # noqa: BLE001 - recorded; the queries will show it too
            counts[t] = f"error: {error_line(e)}"
    try:
        run_sql(query_text(6, refs, sf))
    except Exception:  # noqa: BLE001 - the timed Q6 will record it
        pass
    return counts


def run_queries(spark, refs: dict[str, dict[str, str]], numbers: list[int], repeats: int, sf: float,
                timeout_s: float, postmaster: int | None, join_pushdown: dict[str, bool] | None = None,
                duck=None) -> dict[str, SystemRun]:
    """Query by query, each system in turn runs it `repeats` times (the best counts).

    Interleaving the systems per query spreads any other load on the machine over all of them
    alike. Postgres server CPU and wall time are summed over each system's own query windows.
    `join_pushdown`: Spark's DSv2 join pushdown per system (set before each of its queries);
    `duck`: the DuckDB connection of system (d).
    """
    join_pushdown = join_pushdown or {}

    def runner(system: str):
        if system == "duckdb":
            return lambda text: run_duckdb(duck, text, timeout_s)

        def spark_run(text: str):
            if system in join_pushdown:
                spark.conf.set(JOIN_PUSHDOWN, str(join_pushdown[system]).lower())
            return run_one(spark, text, timeout_s)
        return spark_run

    no_cpu = 0.0 if postmaster is not None else float("nan")  # nan: a remote server
    runs = {s: SystemRun(s, {}, warm_up(lambda text, s=s: runner(s)(text)[1], s, r, sf), no_cpu, 0.0, [])
            for s, r in refs.items()}
    for q in numbers:
        for system, run in runs.items():
            text = query_text(q, refs[system], sf)
            result = QueryRun()
            run.loadavg.append(os.getloadavg()[0])
            cpu0, wall0 = postgres_cpu_seconds(postmaster), time.monotonic()
            for _ in range(repeats):
                try:
                    elapsed, rows, schema = runner(system)(text)
                except Exception as e:  # noqa: BLE001 - a failing query is a result, not a crash
                    result.error, result.error_detail = error_line(e), str(e)[:4000]
                    break
                result.seconds.append(elapsed)
                result.rows, result.schema = rows, schema
            if cpu0 is not None:
                run.pg_cpu_s += postgres_cpu_seconds(postmaster) - cpu0
            run.wall_s += time.monotonic() - wall0
            run.queries[q] = result
            shown = f"{result.best:.2f} s" if result.best is not None else f"FAILED: {result.error}"
            log(f"[{system}] Q{q}: {shown}" + (f" ({len(result.rows)} rows)" if result.rows is not None else ""))
    return runs


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
