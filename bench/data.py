"""TPC-H data: generate with tpchgen-cli, load into Postgres (schema `tpch`), export a Parquet copy.

The load streams `tpchgen-cli csv --stdout` straight into `COPY ... FROM STDIN` (no per-row
Python, no intermediate files), then adds the primary keys and runs VACUUM (FREEZE, ANALYZE) so
that no later reader pays for hint bits. The schema carries a comment naming the generator and
scale factor, so a later run at the same scale factor reuses the data.

The spec's CHAR(n) columns are VARCHAR(n) here, as in DuckDB's and tpchgen's own TPC-H schemas:
CHAR(n) would pad values with blanks in Postgres and make string equality depend on each
engine's padding rules, which is not what this benchmark measures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SCHEMA = "tpch"
INSTALL_HINT = "tpchgen-cli is needed to generate TPC-H data: run `.venv/bin/pip install tpchgen-cli` (PyPI)"


@dataclass(frozen=True)
class Table:
    name: str
    key: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (name, Postgres type)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c, _arrow_type(t), nullable=False) for c, t in self.columns])


def _arrow_type(pg: str) -> pa.DataType:
    if pg == "integer":
        return pa.int32()
    if pg == "date":
        return pa.date32()
    if pg.startswith("numeric("):
        p, s = pg[len("numeric(") : -1].split(",")
        return pa.decimal128(int(p), int(s))
    if pg.startswith("varchar("):
        return pa.string()
    raise ValueError(f"no Arrow type for {pg}")


MONEY = "numeric(15,2)"
TABLES: tuple[Table, ...] = (
    Table("region", ("r_regionkey",), (("r_regionkey", "integer"), ("r_name", "varchar(25)"), ("r_comment", "varchar(152)"))),
    Table(
        "nation",
        ("n_nationkey",),
        (("n_nationkey", "integer"), ("n_name", "varchar(25)"), ("n_regionkey", "integer"), ("n_comment", "varchar(152)")),
    ),
    Table(
        "part",
        ("p_partkey",),
        (
            ("p_partkey", "integer"), ("p_name", "varchar(55)"), ("p_mfgr", "varchar(25)"), ("p_brand", "varchar(10)"),
            ("p_type", "varchar(25)"), ("p_size", "integer"), ("p_container", "varchar(10)"), ("p_retailprice", MONEY),
            ("p_comment", "varchar(23)"),
        ),
    ),
    Table(
        "supplier",
        ("s_suppkey",),
        (
            ("s_suppkey", "integer"), ("s_name", "varchar(25)"), ("s_address", "varchar(40)"), ("s_nationkey", "integer"),
            ("s_phone", "varchar(15)"), ("s_acctbal", MONEY), ("s_comment", "varchar(101)"),
        ),
    ),
    Table(
        "partsupp",
        ("ps_partkey", "ps_suppkey"),
        (
            ("ps_partkey", "integer"), ("ps_suppkey", "integer"), ("ps_availqty", "integer"), ("ps_supplycost", MONEY),
            ("ps_comment", "varchar(199)"),
        ),
    ),
    Table(
        "customer",
        ("c_custkey",),
        (
            ("c_custkey", "integer"), ("c_name", "varchar(25)"), ("c_address", "varchar(40)"), ("c_nationkey", "integer"),
            ("c_phone", "varchar(15)"), ("c_acctbal", MONEY), ("c_mktsegment", "varchar(10)"), ("c_comment", "varchar(117)"),
        ),
    ),
    Table(
        "orders",
        ("o_orderkey",),
        (
            ("o_orderkey", "integer"), ("o_custkey", "integer"), ("o_orderstatus", "varchar(1)"), ("o_totalprice", MONEY),
            ("o_orderdate", "date"), ("o_orderpriority", "varchar(15)"), ("o_clerk", "varchar(15)"),
            ("o_shippriority", "integer"), ("o_comment", "varchar(79)"),
        ),
    ),
    Table(
        "lineitem",
        ("l_orderkey", "l_linenumber"),
        (
            ("l_orderkey", "integer"), ("l_partkey", "integer"), ("l_suppkey", "integer"), ("l_linenumber", "integer"),
            ("l_quantity", MONEY), ("l_extendedprice", MONEY), ("l_discount", MONEY), ("l_tax", MONEY),
            ("l_returnflag", "varchar(1)"), ("l_linestatus", "varchar(1)"), ("l_shipdate", "date"),
            ("l_commitdate", "date"), ("l_receiptdate", "date"), ("l_shipinstruct", "varchar(25)"),
            ("l_shipmode", "varchar(10)"), ("l_comment", "varchar(44)"),
        ),
    ),
)
TABLE_NAMES = tuple(t.name for t in TABLES)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def connect(dsn: str):
    conn = psycopg2.connect(dsn, options="-c DateStyle=ISO -c TimeZone=UTC")
    conn.autocommit = True
    return conn


def tpchgen_cli() -> str:
    """Path of tpchgen-cli: next to this Python (the venv), else on PATH; a clear error if absent."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if not found:
        raise SystemExit(f"error: {INSTALL_HINT}")
    return found


def _loaded_marker(conn, schema: str = SCHEMA) -> dict | None:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT d.description FROM pg_namespace n LEFT JOIN pg_description d"
            " ON d.objoid = n.oid AND d.classoid = 'pg_namespace'::regclass WHERE n.nspname = %s",
            (schema,),
        )
        row = cur.fetchone()
    if not row or not row[0]:
        return None
    try:
        return json.loads(row[0])
    except ValueError:
        return None


class _Progress:
    """A file-like wrapper that reports the bytes read through it every `every_s` seconds."""

    def __init__(self, f, label: str, every_s: float = 15.0):
        self.f, self.label, self.every_s = f, label, every_s
        self.bytes, self.started = 0, time.monotonic()
        self.next = self.started + every_s

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.bytes += len(data)
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every_s
            log(f"  {self.label}: {self.bytes / 2**20:,.0f} MiB in {now - self.started:.0f} s")
        return data

    readline = read


def load_postgres(dsn: str, sf: float, *, force: bool = False, schema: str = SCHEMA) -> dict:
    """Make sure `schema` (default `tpch`) holds TPC-H data at scale factor `sf`; return its
    marker. Tests load a schema of their own (tests/test_cluster_tpch.py)."""
    conn = connect(dsn)
    try:
        marker = _loaded_marker(conn, schema)
        if marker and marker.get("sf") == sf and not force:
            log(f"Postgres: reusing {schema}.* at SF {sf} (loaded {marker['loaded_at']}; --reload to regenerate)")
            return marker
        gen = tpchgen_cli()
        version = subprocess.run([gen, "--version"], capture_output=True, text=True).stdout.strip()
        log(f"Postgres: loading TPC-H SF {sf} into schema {schema} with {version}")
        started = time.monotonic()
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            cur.execute(f"CREATE SCHEMA {schema}")
            for t in TABLES:
                cols = ", ".join(f"{c} {typ} NOT NULL" for c, typ in t.columns)
                cur.execute(f"CREATE TABLE {schema}.{t.name} ({cols})")
            for t in TABLES:
                t0 = time.monotonic()
                cmd = [gen, "csv", "-s", str(sf), "-T", t.name, "--stdout", "--no-progress", "-q"]
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, bufsize=1 << 20)
                try:
                    cur.copy_expert(
                        f"COPY {schema}.{t.name} FROM STDIN WITH (FORMAT csv, HEADER true)",
                        _Progress(proc.stdout, f"COPY {t.name}"),
                        size=1 << 20,
                    )
                finally:
                    proc.stdout.close()
                    if proc.wait() != 0:
                        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
                rows = cur.rowcount
                cur.execute(f"ALTER TABLE {schema}.{t.name} ADD PRIMARY KEY ({', '.join(t.key)})")
                cur.execute(f"VACUUM (FREEZE, ANALYZE) {schema}.{t.name}")
                log(f"  {t.name}: {rows:,} rows in {time.monotonic() - t0:.1f} s (COPY, primary key, vacuum)")
            marker = {
                "generator": version,
                "sf": sf,
                "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "load_s": round(time.monotonic() - started, 1),
            }
            cur.execute(f"COMMENT ON SCHEMA {schema} IS %s", (json.dumps(marker),))
        log(f"Postgres: loaded in {marker['load_s']} s")
        return marker
    finally:
        conn.close()


def row_counts(dsn: str) -> dict[str, int]:
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            counts = {}
            for t in TABLE_NAMES:
                cur.execute(f"SELECT count(*) FROM {SCHEMA}.{t}")
                counts[t] = cur.fetchone()[0]
            return counts
    finally:
        conn.close()


def key_bounds(dsn: str) -> dict[str, tuple[str, int, int]]:
    """Per table: (first key column, min, max), for the JDBC runner's partitioned reads."""
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            bounds = {}
            for t in TABLES:
                col = t.key[0]
                cur.execute(f"SELECT min({col}), max({col}) FROM {SCHEMA}.{t.name}")
                lo, hi = cur.fetchone()
                bounds[t.name] = (col, int(lo), int(hi))
            return bounds
    finally:
        conn.close()


def export_parquet(dsn: str, marker: dict, out_dir: Path) -> dict[str, Path]:
    """A static Parquet copy of every table (exported once per load); returns table -> file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = out_dir / "_loaded.json"
    files = {t.name: out_dir / f"{t.name}.parquet" for t in TABLES}
    if stamp.is_file() and json.loads(stamp.read_text()) == marker and all(f.is_file() for f in files.values()):
        log(f"Parquet copy: reusing {out_dir}")
        return files
    stamp.unlink(missing_ok=True)
    log(f"Parquet copy: exporting {SCHEMA}.* from Postgres to {out_dir}")
    conn = connect(dsn)
    try:
        for t in TABLES:
            t0 = time.monotonic()
            csv_path = out_dir / f"{t.name}.csv"
            with open(csv_path, "wb") as f, conn.cursor() as cur:
                cols = ", ".join(c for c, _ in t.columns)
                cur.copy_expert(f"COPY (SELECT {cols} FROM {SCHEMA}.{t.name}) TO STDOUT WITH (FORMAT csv)", f, size=1 << 20)
            schema = t.arrow_schema()
            reader = pacsv.open_csv(
                csv_path,
                read_options=pacsv.ReadOptions(column_names=schema.names, block_size=64 << 20),
                convert_options=pacsv.ConvertOptions(column_types={f.name: f.type for f in schema}),
            )
            rows = 0
            with pq.ParquetWriter(files[t.name], schema) as writer:
                for batch in reader:
                    writer.write_batch(batch.cast(schema))
                    rows += batch.num_rows
            csv_path.unlink()
            log(f"  {t.name}: {rows:,} rows in {time.monotonic() - t0:.1f} s")
    finally:
        conn.close()
    stamp.write_text(json.dumps(marker))
    return files
