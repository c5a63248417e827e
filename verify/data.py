"""`htap verify data`: every row of the source against the replica, at exactly one snapshot.

1. Export a source snapshot (htap.verify.snapshot): it equals the replica at seq S = C-1. Wait
   until each table's max safe seq has reached S, pin S, and plan the reads.
2. Split each table's key space into ranges on its first key column: the replica's partition
   bounds plus equal-count quantiles of the replica's keys (`range_rows` rows per range). The
   first and last ranges are open, so source rows outside the replica's key span are counted.
3. Per range, both sides compute (row count, sum of 60-bit row hashes) over the same canonical
   row text (htap.verify.canonical): the source as one aggregate query inside a transaction at the
   exported snapshot (only two numbers travel; Postgres or MySQL/MariaDB SQL), the replica in
   DuckDB over the merged rows at S. A MySQL/MariaDB snapshot lives in one transaction only, so
   its ranges are checked one after another on that connection.
4. Only for a range whose checksums differ, both sides list (key, row md5); the differences are
   reported by key as missing (in the source, not the replica), extra (in the replica only) and
   different (both, other values: with the differing columns and both values).

Load on the source is bounded: `parallelism` connections (and worker threads), and a token
bucket on the rows the source scans (`max_rows_per_second`). Writes may go on all the while: the
source side sees its snapshot, the replica side seq S, so nothing that commits later can show
up as a difference.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import pyarrow as pa

from htap import engine
from htap.conf import HtapConfig, SourceConfig
from htap.connectors.registry import open_queryable
from htap.errors import HtapError, NoSuchTableError
from htap.pushdown.replica_reader import read_plan
from htap.replica.leases import kept
from htap.replica.metadata import MetadataStore
from htap.replica.models import STATE_UNHEALTHY, TableInfo
from htap.replica.partitions import decode_bounds, matching_partitions
from htap.replica.read_plans import ReadPlan, plan_reads, queryable_window
from htap.replica.warehouse import open_warehouse
from htap.pushdown.spark_types import spark_type
from htap.rewrite.pushed import Expr, Literal, table_plan
from htap.verify.canonical import Canonical, prepare_batch, prepared_schema, qi, qi_my
from htap.verify.snapshot import ExportedSnapshot, VerifyError, wait_for_seq
from htap.verify.views import verify_views

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataOptions:
    source: str | None = None
    parallelism: int = 2  # source connections (and worker threads) at once
    max_rows_per_second: float | None = None  # source rows scanned per second (None: unbounded)
    range_rows: int = 50_000  # rows per hashed key range
    max_report_rows: int = 100  # keys listed per kind of difference and table
    wait_s: float = 60.0  # how long to wait for the replica to reach the snapshot
    mark_unhealthy: bool = False


class TokenBucket:
    """Rows per second, with up to one second of burst; `acquire` blocks until they are due."""

    def __init__(self, rate: float | None):
        self.rate = rate if rate and rate > 0 else None
        self._lock = threading.Lock()
        self._due = time.monotonic()  # when everything granted so far has been paid for
        self.waited_s = 0.0

    def acquire(self, n: int) -> None:
        if self.rate is None or n <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._due = max(self._due, now - 1.0) + n / self.rate
            wait = self._due - now
            if wait > 0:
                self.waited_s += wait
        if wait > 0:
            time.sleep(wait)


# --- key ranges ---------------------------------------------------------------------------------


def _literal(value, t: pa.DataType) -> Literal | None:
    """A range bound as a pushed-plan literal (None: the key type cannot bound a range)."""
    if pa.types.is_integer(t):
        return Literal("long", int(value))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return Literal("string", value)
    if pa.types.is_date32(t):
        return Literal("date", value.isoformat())
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return Literal("timestamp_ntz", value.isoformat(sep=" "))
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return Literal("timestamp", (value - epoch) // dt.timedelta(microseconds=1))
    if pa.types.is_decimal(t):
        return Literal("decimal", str(value))
    if pa.types.is_floating(t):
        return Literal("double", float(value))
    return None


@dataclass(frozen=True)
class KeyRange:
    index: int
    lo: object | None  # inclusive; None: unbounded
    hi: object | None  # exclusive; None: unbounded

    def predicates(self, key0: str, t: pa.DataType) -> tuple[Expr, ...]:
        """`lo <= key0 < hi` as pushed-plan conjuncts."""
        name = spark_type(t).lower()
        column = Expr.column(key0, name)
        out = []
        for bound, op in ((self.lo, ">="), (self.hi, "<")):
            if bound is not None:
                out.append(Expr.call(op, "boolean", column, Expr.literal(_literal(bound, t), name)))
        return tuple(out)

    def source_where(self, key0: str, t: pa.DataType, dialect: str) -> tuple[str, list]:
        """The range as a WHERE clause of the source's SQL; strings compare by code point, as
        DuckDB placed the bounds (Postgres: the C collation; MySQL: the UTF-8 bytes)."""
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        if dialect == "mysql":
            col = f"CAST({qi_my(key0)} AS BINARY)" if text else qi_my(key0)
        else:
            col = qi(key0) + (' COLLATE "C"' if text else "")
        where, params = [], []
        if self.lo is not None:
            where.append(f"{col} >= %s")
            params.append(self.lo)
        if self.hi is not None:
            where.append(f"{col} < %s")
            params.append(self.hi)
        return (" AND ".join(where) or "TRUE"), params

    def to_dict(self) -> dict:
        return {"index": self.index, "from": jsonable(self.lo), "to": jsonable(self.hi)}


def split_ranges(bounds: list) -> list[KeyRange]:
    edges = [None, *bounds, None]
    return [KeyRange(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


# --- values in reports ----------------------------------------------------------------------------


def jsonable(v):
    """A value as JSON: numbers and strings as they are, decimals as text, times in ISO form (UTC)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc)
        return v.isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


# --- one table ----------------------------------------------------------------------------------


@dataclass
class RangeOutcome:
    range: KeyRange
    replica_rows: int = 0
    source_rows: int = 0
    replica_sum: int = 0
    source_sum: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and (self.replica_rows, self.replica_sum) == (self.source_rows, self.source_sum)


@dataclass
class TableCheck:
    table: TableInfo
    seq: int | None = None
    canonical: Canonical | None = None
    plans: list[ReadPlan] = field(default_factory=list)
    splits: pa.Array | None = None
    part_ids: tuple[int, ...] = ()  # the id of each partition between `splits`
    ranges: list[KeyRange] = field(default_factory=list)
    outcomes: list[RangeOutcome] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    extra: list[dict] = field(default_factory=list)
    different: list[dict] = field(default_factory=list)
    counts: dict = field(default_factory=lambda: {"missing": 0, "extra": 0, "different": 0})
    error: str | None = None
    pin_id: int | None = None
    source_position: str = ""  # the snapshot's position in the source's own notation
    started: float = field(default_factory=time.monotonic)
    duration_s: float = 0.0
    marked_unhealthy: bool = False
    timings: dict = field(default_factory=lambda: {"wait_s": 0.0, "plan_s": 0.0, "replica_s": 0.0, "source_s": 0.0})
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def key0(self) -> str:
        return self.table.key[0]

    @property
    def key0_type(self) -> pa.DataType:
        return self.table.arrow_schema.field(self.key0).type

    @property
    def ok(self) -> bool:
        return self.error is None and all(o.ok for o in self.outcomes)


class DataVerifier:
    def __init__(self, cfg: HtapConfig, source: SourceConfig, snap: ExportedSnapshot, opts: DataOptions):
        self.queryable = open_queryable(source)
        self.dialect = self.queryable.dialect  # the source side's SQL (postgres or mysql)
        self.cfg = cfg
        self.source = source
        self.snap = snap
        self.opts = opts
        self.bucket = TokenBucket(opts.max_rows_per_second)
        self.source_rows_scanned = 0
        self._local = threading.local()
        self._conns: list = []
        self._lock = threading.Lock()

    # source connections: one per worker thread, each in a transaction at the snapshot
    def _source(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.snap.open_transaction()
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def close(self) -> None:
        for c in self._conns:
            c.close()

    def _source_query(self, sql: str, params: list, estimate: int) -> list[tuple]:
        self.bucket.acquire(max(1, estimate))
        with self._source().cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def _scanned(self, rows: int, estimate: int) -> None:
        with self._lock:
            self.source_rows_scanned += rows
        if rows > estimate:
            self.bucket.acquire(rows - estimate)  # pay the difference (slows the next query)

    # --- planning (main thread) ---

    def prepare(self, store: MetadataStore, check: TableCheck) -> None:
        started = time.monotonic()
        table = wait_for_seq(store, check.table, self.snap.seq, self.opts.wait_s)
        check.timings["wait_s"] = time.monotonic() - started
        check.table = table
        check.seq = self.snap.seq
        check.source_position = self.snap.position
        check.canonical = Canonical(self.queryable.source_table(table), self.dialect)
        window = queryable_window(store, table, self.cfg.window_s)
        if window is None or not window.min_seq <= self.snap.seq <= window.max_seq:
            raise VerifyError(f"{table.qualified_name}: seq {self.snap.seq} is outside the replica's queryable window {window}")
        pin, deltas = store.pin(table.id, self.snap.seq, self.cfg.pin_ttl_s)
        check.pin_id = pin.id
        layout = store.layout_at(table.id, self.snap.seq)  # a repartition since then leaves it readable
        check.plans = plan_reads(table, deltas, self.snap.seq, store.truncated_at(table.id, self.snap.seq), layout=layout)
        check.splits = decode_bounds(layout.bounds_b64)
        check.part_ids = layout.ids
        check.ranges = split_ranges(self._bounds(check))
        check.timings["plan_s"] = time.monotonic() - started - check.timings["wait_s"]

    def _bounds(self, check: TableCheck) -> list:
        """Range boundaries: partition bounds and equal-count quantiles of the replica's keys."""
        if not _rangeable(check.key0_type):
            return []
        bounds = set(check.splits.to_pylist()) if check.splits is not None else set()
        keys = self._replica_table(check, None, columns=(check.key0,))
        n = keys.num_rows
        parts = math.ceil(n / max(1, self.opts.range_rows))
        if parts > 1:
            con = engine.cursor()
            try:
                con.register("keys", keys)
                fractions = ", ".join(str(i / parts) for i in range(1, parts))
                (qs,) = con.execute(f"SELECT quantile_disc({qi(check.key0)}, [{fractions}]) FROM keys").fetchone()
                bounds |= set(qs)
            finally:
                con.close()
        return sorted(b for b in bounds if b is not None)

    # --- the replica side ---

    def _replica_table(self, check: TableCheck, rng: KeyRange | None, columns: tuple[str, ...] | None = None) -> pa.Table:
        filters = rng.predicates(check.key0, check.key0_type) if rng else ()
        schema = check.table.arrow_schema
        plan = table_plan(check.table.qualified_name, columns if columns is not None else schema.names, filters)
        out = schema if columns is None else pa.schema([schema.field(c) for c in columns])
        parts = {check.part_ids[i] for i in matching_partitions(check.splits, check.key0, filters)}
        batches = []
        for read in check.plans:
            if read.part in parts:
                batches += read_plan(
                    open_warehouse(self.cfg), check.table.qualified_name, schema, list(check.table.key), read, plan, out
                )
        return pa.Table.from_batches(batches, schema=out)

    def _replica_checksum(self, check: TableCheck, rng: KeyRange) -> tuple[int, int]:
        rows = _prepared(self._replica_table(check, rng))
        con = engine.cursor()
        try:
            con.register("rows", rows)
            n, s = con.execute(f"SELECT count(*), coalesce(sum({check.canonical.row_hash('duckdb')}), 0) FROM rows").fetchone()
            return int(n), int(s)
        finally:
            con.close()

    # --- the source side ---

    def _relation(self, table: TableInfo) -> str:
        q = qi_my if self.dialect == "mysql" else qi
        return f"{q(table.schema)}.{q(table.name)}"

    def _source_checksum(self, check: TableCheck, rng: KeyRange, estimate: int) -> tuple[int, int]:
        where, params = rng.source_where(check.key0, check.key0_type, self.dialect)
        sql = (
            f"SELECT count(*), coalesce(sum(h), 0) FROM (SELECT {check.canonical.row_hash(self.dialect)} AS h"
            f" FROM {self._relation(check.table)} WHERE {where}) q"
        )
        ((n, s),) = self._source_query(sql, params, estimate)
        self._scanned(int(n), estimate)
        return int(n), int(s)

    # --- one range (worker thread) ---

    def check_range(self, check: TableCheck, rng: KeyRange) -> RangeOutcome:
        out = RangeOutcome(rng)
        try:
            t0 = time.monotonic()
            out.replica_rows, out.replica_sum = self._replica_checksum(check, rng)
            t1 = time.monotonic()
            out.source_rows, out.source_sum = self._source_checksum(check, rng, out.replica_rows)
            with check.lock:
                check.timings["replica_s"] += t1 - t0
                check.timings["source_s"] += time.monotonic() - t1  # includes rate-limit waits
            if not out.ok:
                self._locate(check, rng, out.replica_rows)
        except Exception as e:  # noqa: BLE001 - reported per range, the run goes on
            log.exception("verifying %s range %s", check.table.qualified_name, rng)
            out.error = f"{type(e).__name__}: {e}"
        return out

    def _locate(self, check: TableCheck, rng: KeyRange, estimate: int) -> None:
        """List (key, row md5) on both sides of a mismatching range; record the differences."""
        canon = check.canonical
        raw = self._replica_table(check, rng)
        prepared = _prepared(raw).append_column("__htap_row", pa.array(range(raw.num_rows), pa.int64()))
        con = engine.cursor()
        try:
            con.register("rows", prepared)
            replica = dict(con.execute(f"SELECT {canon.key_text('duckdb')}, {canon.row_md5('duckdb')} FROM rows").fetchall())
        finally:
            con.close()
        where, params = rng.source_where(check.key0, check.key0_type, self.dialect)
        src = self._source_query(
            f"SELECT {canon.key_text(self.dialect)}, {canon.row_md5(self.dialect)} FROM {self._relation(check.table)} WHERE {where}",
            params,
            estimate,
        )
        self._scanned(len(src), estimate)
        source = dict(src)
        missing = sorted(k for k in source if k not in replica)
        extra = sorted(k for k in replica if k not in source)
        different = sorted(k for k in source if k in replica and source[k] != replica[k])
        limit = self.opts.max_report_rows
        with check.lock:
            room = {kind: max(0, limit - len(getattr(check, kind))) for kind in ("missing", "extra", "different")}
            check.counts["missing"] += len(missing)
            check.counts["extra"] += len(extra)
            check.counts["different"] += len(different)
        missing, extra, different = missing[: room["missing"]], extra[: room["extra"]], different[: room["different"]]
        wanted = missing + extra + different
        if not wanted:
            return
        src_rows = self._source_rows(check, rng, missing + different)
        rep_rows = self._replica_rows(check, prepared, raw, extra + different)
        with check.lock:
            check.missing += [src_rows[k]["key"] for k in missing]
            check.extra += [rep_rows[k]["key"] for k in extra]
            for k in different:
                s, r = src_rows[k], rep_rows[k]
                cols = [
                    {"column": c, "source": s["values"][c], "replica": r["values"][c]}
                    for c in canon.columns
                    if s["texts"][c] != r["texts"][c]
                ]
                check.different.append({"key": s["key"], "columns": cols})

    def _source_rows(self, check: TableCheck, rng: KeyRange, keys: list[str]) -> dict[str, dict]:
        if not keys:
            return {}
        canon = check.canonical
        where, params = rng.source_where(check.key0, check.key0_type, self.dialect)
        texts = ", ".join(canon.column_text(self.dialect, c) for c in canon.columns)
        raw = ", ".join((qi_my if self.dialect == "mysql" else qi)(c) for c in canon.columns)
        in_keys = "IN %s" if self.dialect == "mysql" else "= ANY(%s)"  # pymysql spells a tuple as a list
        rows = self._source_query(
            f"SELECT {canon.key_text(self.dialect)}, {texts}, {raw} FROM {self._relation(check.table)}"
            f" WHERE {where} AND {canon.key_text(self.dialect)} {in_keys}",
            [*params, tuple(keys) if self.dialect == "mysql" else keys],
            len(keys),
        )
        return {r[0]: _row_entry(canon, r[1 : 1 + len(canon.columns)], r[1 + len(canon.columns) :]) for r in rows}

    def _replica_rows(self, check: TableCheck, prepared: pa.Table, raw: pa.Table, keys: list[str]) -> dict[str, dict]:
        if not keys:
            return {}
        canon = check.canonical
        texts = ", ".join(canon.column_text("duckdb", c) for c in canon.columns)
        con = engine.cursor()
        try:
            con.register("rows", prepared)
            con.register("wanted", pa.table({"k": pa.array(keys, pa.string())}))
            found = con.execute(
                f"SELECT {canon.key_text('duckdb')} AS k, {texts}, __htap_row FROM rows"
                f" WHERE {canon.key_text('duckdb')} IN (SELECT k FROM wanted)"
            ).fetchall()
        finally:
            con.close()
        out = {}
        for r in found:
            values = [raw.column(c)[r[-1]].as_py() for c in canon.columns]
            out[r[0]] = _row_entry(canon, r[1:-1], values)
        return out


def _rangeable(t: pa.DataType) -> bool:
    """Whether key ranges can be bounded on a column of this type (else one range)."""
    return any(
        check(t)
        for check in (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_date32,
                      pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_floating)
    )


def _prepared(table: pa.Table) -> pa.Table:
    batches = [prepare_batch(b) for b in table.to_batches()]
    return pa.Table.from_batches(batches, schema=prepared_schema(table.schema))


def _row_entry(canon: Canonical, texts, values) -> dict:
    by_col = dict(zip(canon.columns, values))
    return {
        "key": {k: jsonable(by_col[k]) for k in canon.key},
        "texts": dict(zip(canon.columns, texts)),
        "values": {c: jsonable(v) for c, v in by_col.items()},
    }


# --- the run --------------------------------------------------------------------------------------


def select_tables(store: MetadataStore, source: SourceConfig, names: list[str]) -> list[TableInfo]:
    tables = store.list_tables(source.name)
    if not names:
        return tables
    by_name = {t.qualified_name: t for t in tables}
    out = []
    for n in names:
        if n not in by_name:
            known = ", ".join(by_name) or "none"
            raise NoSuchTableError(f"{n} is not an HTAP table of source {source.name!r} (HTAP tables: {known})")
        out.append(by_name[n])
    return out


def verify_data(cfg: HtapConfig, tables: list[str] | None = None, opts: DataOptions = DataOptions()) -> dict:
    """Compare the named HTAP tables (default: all of the source) with their source; the report."""
    source = cfg.source(opts.source)
    started = time.time()
    store = MetadataStore(cfg.metadata)
    checks = [TableCheck(t) for t in select_tables(store, source, list(tables or []))]
    try:
        with ExportedSnapshot(source) as snap:
            verifier = DataVerifier(cfg, source, snap, opts)
            try:
                with ExitStack() as leases:  # each table's lease renewed until the comparison ends
                    for check in checks:
                        try:
                            verifier.prepare(store, check)
                        except HtapError as e:
                            check.error = str(e)
                        if check.pin_id is not None:
                            leases.enter_context(kept(str(cfg.metadata), check.pin_id, cfg.pin_ttl_s))
                    work = [(c, r) for c in checks if c.error is None for r in c.ranges]
                    workers = max(1, min(opts.parallelism, snap.max_connections or opts.parallelism))
                    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
                        outcomes = list(pool.map(lambda cr: (cr[0], verifier.check_range(*cr)), work))
                for check, outcome in outcomes:
                    check.outcomes.append(outcome)
            finally:
                verifier.close()
            snapshot = snap.to_dict()
        for check in checks:
            check.duration_s = time.monotonic() - check.started
            if check.pin_id is not None:
                store.release_pin(check.pin_id)
            if opts.mark_unhealthy and not check.ok and check.error is None:
                store.set_state(check.table.id, STATE_UNHEALTHY, _reason(check))
                check.marked_unhealthy = True
        views = verify_views(cfg, store, [c.table for c in checks], snapshot["seq"], opts.wait_s, opts.max_report_rows)
    finally:
        store.close()
    report = {
        "kind": "htap-verify-data",
        "source": source.name,
        "snapshot": snapshot,
        "started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        "duration_s": round(time.time() - started, 3),
        "options": {
            "parallelism": opts.parallelism,
            "max_rows_per_second": opts.max_rows_per_second,
            "range_rows": opts.range_rows,
        },
        "source_rows_scanned": verifier.source_rows_scanned,
        "rate_limit_wait_s": round(verifier.bucket.waited_s, 3),
        "tables": [_table_report(c) for c in checks],
        "views": views,
    }
    report["ok"] = all(t["ok"] for t in report["tables"]) and all(v["ok"] for v in views)
    return report


def _reason(check: TableCheck) -> str:
    c = check.counts
    sample = (check.missing + check.extra + [d["key"] for d in check.different])[:3]
    errors = [o.error for o in check.outcomes if o.error]
    what = f"{c['missing']} missing, {c['extra']} extra, {c['different']} different rows"
    if errors:
        what += f", {len(errors)} ranges failed ({errors[0]})"
    return f"htap verify data: {what} at seq {check.seq} ({check.source_position}); e.g. keys {sample}"


def _table_report(check: TableCheck) -> dict:
    t = check.table
    out = {
        "table": t.qualified_name,
        "key": list(t.key),
        "ok": check.ok,
        "error": check.error,
        "seq": check.seq,
        "source_rows": sum(o.source_rows for o in check.outcomes),
        "replica_rows": sum(o.replica_rows for o in check.outcomes),
        "ranges": len(check.ranges),
        "mismatched_ranges": [
            {**o.range.to_dict(), "source_rows": o.source_rows, "replica_rows": o.replica_rows, "error": o.error}
            for o in check.outcomes
            if not o.ok
        ],
        "missing_count": check.counts["missing"],
        "extra_count": check.counts["extra"],
        "different_count": check.counts["different"],
        "missing": sorted(check.missing, key=_key_order),
        "extra": sorted(check.extra, key=_key_order),
        "different": sorted(check.different, key=lambda d: _key_order(d["key"])),
        "marked_unhealthy": check.marked_unhealthy,
        "duration_s": round(check.duration_s, 3),
        "timings": {k: round(v, 3) for k, v in check.timings.items()},
    }
    out["report_truncated"] = any(out[f"{k}_count"] > len(out[k]) for k in ("missing", "extra", "different"))
    return out


def _key_order(key: dict):
    return [(0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in key.values()]
