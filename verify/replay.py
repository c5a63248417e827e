"""`htap verify replay`: a query log through Spark on the replica and on the source, one snapshot.

1. Read the log (a .sql file of `;`-separated statements, or a folder of them) and parse each
   statement with sqlglot (Spark SQL). Drop what must not or cannot be compared: statements
   that are not queries (side effects), non-deterministic functions (rand, now, uuid, ...),
   LIMIT without ORDER BY, and queries on tables that are not HTAP tables.
2. Normalize: table names resolved to `<schema>.<table>`, identifiers in canonical case,
   literals replaced by parameters (an IN list of literals by one), printed in sqlglot's
   canonical form; its hash is the pattern's fingerprint. One query per pattern is kept (the
   first seen, with its own literals); queries differing only in literals count as one.
3. Export a source snapshot (htap.verify.snapshot) = replica seq S, and set up two catalogs on
   the same config: `htap_replica` (route=replica, as_of_seq=S) and `htap_source` (route=source,
   source_snapshot=<exported name>). Each query runs twice through Spark SQL, its table
   references rewritten by sqlglot to one catalog, then the other.
4. Compare: the same columns and types; rows as multisets unless the query has a top-level
   ORDER BY; decimals, integers, strings and dates exactly, timestamps normalized to UTC, floats
   within a relative tolerance. Record wall time and CPU (Spark's JVM tree, the Postgres server)
   of each side; write JSON and JUnit XML; any mismatch or failed query fails the run.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

from htap.catalog.shim import spark_session
from htap.conf import HtapConfig
from htap.errors import ConfigError
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo
from htap.connectors.registry import open_queryable
from htap.verify.cpu import SourceCpu, SparkCpu
from htap.verify.data import jsonable
from htap.verify.snapshot import ExportedSnapshot, wait_for_seq

log = logging.getLogger(__name__)

DIALECT = "spark"
REPLICA_CATALOG = "htap_replica"
SOURCE_CATALOG = "htap_source"

# Functions whose result changes from run to run (by sqlglot class or by name).
NONDETERMINISTIC_TYPES = tuple(
    getattr(exp, name)
    for name in ("Rand", "Randn", "Uuid", "CurrentTimestamp", "CurrentDate", "CurrentTime", "CurrentDatetime",
                 "Localtimestamp", "CurrentTimezone", "CurrentUser", "Shuffle", "Random")
    if hasattr(exp, name)
)
NONDETERMINISTIC_NAMES = {
    "rand", "randn", "random", "uuid", "now", "current_timestamp", "current_date", "current_time", "localtimestamp",
    "localtime", "shuffle", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
    "input_file_block_start", "input_file_block_length", "current_timezone", "current_user", "user", "session_user",
    "unix_timestamp", "random_uuid", "gen_random_uuid", "clock_timestamp", "transaction_timestamp", "statement_timestamp",
}


@dataclass(frozen=True)
class ReplayOptions:
    source: str | None = None
    schema: str | None = None  # schema of unqualified table names
    out: Path = Path("htap-verify")
    float_tolerance: float = 1e-9
    wait_s: float = 60.0
    max_queries: int | None = None
    spark_master: str = "local[2]"


# --- the log ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    origin: str  # file:number
    text: str


def split_statements(text: str) -> list[str]:
    """`;`-separated statements, split on sqlglot's tokens (a `;` inside a string stays)."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except TokenError:
        return [s.strip() for s in text.split(";") if s.strip()]
    out, start = [], None
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if start is not None:
                out.append(text[start : tok.start].strip())
            start = None
        elif start is None:
            start = tok.start
    if start is not None:
        out.append(text[start:].strip())
    return [s for s in out if s]


def read_log(paths: list[str | Path]) -> list[Statement]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*.sql") if f.is_file())
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"query log {p} does not exist: give a .sql file or a folder of them")
    out = []
    for f in files:
        for i, text in enumerate(split_statements(f.read_text()), 1):
            out.append(Statement(f"{f}:{i}", text))
    return out


# --- classification and normalization -----------------------------------------------------------


@dataclass
class Pattern:
    fingerprint: str
    normalized: str
    statement: Statement  # the first one seen
    expression: exp.Expression  # table references resolved to <schema>.<table>, no catalog
    tables: list[str]
    ordered: bool
    occurrences: int = 1
    origins: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Dropped:
    statement: Statement
    reason: str


class Resolver:
    """Table names in the log -> HTAP tables (schema, name)."""

    def __init__(self, tables: list[TableInfo], default_schema: str | None):
        self.tables = {(t.schema.lower(), t.name.lower()): t for t in tables}
        self.by_name: dict[str, list[TableInfo]] = {}
        for t in tables:
            self.by_name.setdefault(t.name.lower(), []).append(t)
        self.default_schema = default_schema

    def resolve(self, db: str | None, name: str) -> TableInfo | str:
        if db:
            return self.tables.get((db.lower(), name.lower())) or f"{db}.{name} is not an HTAP table"
        if self.default_schema:
            return self.tables.get((self.default_schema.lower(), name.lower())) or (
                f"{self.default_schema}.{name} is not an HTAP table"
            )
        found = self.by_name.get(name.lower(), [])
        if len(found) == 1:
            return found[0]
        if not found:
            return f"{name} is not an HTAP table"
        return f"{name} is ambiguous ({', '.join(t.qualified_name for t in found)}): pass --schema"


def _nondeterministic(e: exp.Expression) -> str | None:
    for node in e.walk():
        if isinstance(node, NONDETERMINISTIC_TYPES):
            return type(node).__name__.lower()
        if isinstance(node, exp.Anonymous) and str(node.name).lower() in NONDETERMINISTIC_NAMES:
            return str(node.name).lower()
        if isinstance(node, exp.TableSample):
            return "TABLESAMPLE"
    for query in e.find_all(exp.Select, exp.SetOperation):
        if query.args.get("limit") and not query.args.get("order"):
            return "LIMIT without ORDER BY"  # which rows come back is up to the engine
    return None


def _cte_names(e: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in e.find_all(exp.CTE)}


def _resolve_tables(e: exp.Expression, resolver: Resolver) -> tuple[list[str], str | None]:
    ctes = _cte_names(e)
    names = []
    for table in e.find_all(exp.Table):
        if not table.name or (not table.db and table.name.lower() in ctes):
            continue
        found = resolver.resolve(table.db or None, table.name)
        if isinstance(found, str):
            return [], found
        table.set("catalog", None)
        table.set("db", exp.to_identifier(found.schema))
        table.set("this", exp.to_identifier(found.name))
        names.append(found.qualified_name)
    if not names:
        return [], "reads no HTAP table"
    return sorted(set(names)), None


def _parameterized(e: exp.Expression) -> exp.Expression:
    """Literals -> parameters (an IN list of literals -> one parameter); positions kept."""
    e = e.copy()
    positional = set()
    for clause in (exp.Group, exp.Order):
        for node in e.find_all(clause):
            for item in node.expressions:
                target = item.this if isinstance(item, exp.Ordered) else item
                if isinstance(target, exp.Literal) and not target.is_string:
                    positional.add(id(target))  # GROUP BY 1 / ORDER BY 2 are column positions
    for node in list(e.find_all(exp.Literal, exp.Boolean)):
        if id(node) not in positional:
            node.replace(exp.Placeholder())
    for node in list(e.find_all(exp.In)):
        values = node.expressions
        if values and all(isinstance(v, exp.Placeholder) for v in values):
            node.set("expressions", [exp.Placeholder()])
    return e


def normalize(e: exp.Expression) -> str:
    """The canonical text of a query pattern (tables already resolved)."""
    e = normalize_identifiers(_parameterized(e), dialect=DIALECT)
    return e.sql(dialect=DIALECT, normalize=True)


def fingerprint(normalized: str) -> str:
    return hashlib.sha1(normalized.encode()).hexdigest()[:16]


def classify(statements: list[Statement], resolver: Resolver) -> tuple[list[Pattern], list[Dropped], int]:
    """(patterns in first-seen order, dropped statements, statements folded into a pattern)."""
    patterns: dict[str, Pattern] = {}
    dropped: list[Dropped] = []
    duplicates = 0
    for st in statements:
        try:
            parsed = sqlglot.parse(st.text, read=DIALECT)
        except (ParseError, TokenError) as e:
            dropped.append(Dropped(st, f"cannot parse: {str(e).splitlines()[0]}"))
            continue
        parsed = [p for p in parsed if p is not None]
        if len(parsed) != 1:
            dropped.append(Dropped(st, "not one statement"))
            continue
        e = parsed[0]
        if not isinstance(e, exp.Query):
            dropped.append(Dropped(st, f"not a query ({e.key.upper()}): may have side effects"))
            continue
        why = _nondeterministic(e)
        if why:
            dropped.append(Dropped(st, f"non-deterministic: {why}"))
            continue
        tables, problem = _resolve_tables(e, resolver)
        if problem:
            dropped.append(Dropped(st, problem))
            continue
        norm = normalize(e)
        fp = fingerprint(norm)
        if fp in patterns:
            patterns[fp].occurrences += 1
            patterns[fp].origins.append(st.origin)
            duplicates += 1
            continue
        patterns[fp] = Pattern(fp, norm, st, e, tables, ordered=bool(e.args.get("order")), origins=[st.origin])
    return list(patterns.values()), dropped, duplicates


def in_catalog(e: exp.Expression, catalog: str) -> str:
    """The query as Spark SQL with every HTAP table reference in `catalog`."""
    e = e.copy()
    for table in e.find_all(exp.Table):
        if table.args.get("db") is not None:
            table.set("catalog", exp.to_identifier(catalog))
    return e.sql(dialect=DIALECT)


# --- comparing results ----------------------------------------------------------------------------


def _value(v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (list, tuple)):
        return tuple(_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((_value(k), _value(x)) for k, x in v.items()))
    if hasattr(v, "asDict"):  # a nested Row
        return tuple(_value(x) for x in v)
    return v


def _sort_key(row: tuple):
    def one(v):
        if v is None:
            return (0, "")
        if isinstance(v, float):
            return (1, "nan") if math.isnan(v) else (1, float(f"{v:.9g}"))
        if isinstance(v, (bool, int, decimal.Decimal)):
            return (1, v)
        return (2, repr(v))

    return tuple(one(v) for v in row)


def _equal(a, b, tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol * 1e-3)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_equal(x, y, tol) for x, y in zip(a, b))
    return a == b  # decimals, integers, strings, dates and timestamps: exactly


def compare(replica: list[tuple], source: list[tuple], ordered: bool, tol: float) -> dict | None:
    """None if the results agree, else what differs (counts and the first differing rows)."""
    r = [tuple(_value(v) for v in row) for row in replica]
    s = [tuple(_value(v) for v in row) for row in source]
    if not ordered:
        r, s = sorted(r, key=_sort_key), sorted(s, key=_sort_key)
    diffs = []
    for i, (x, y) in enumerate(zip(r, s)):
        if not _equal(x, y, tol):
            diffs.append({"row": i, "replica": _show(x), "source": _show(y)})
    if not diffs and len(r) == len(s):
        return None
    return {
        "replica_rows": len(r),
        "source_rows": len(s),
        "differing_rows": len(diffs) + abs(len(r) - len(s)),
        "first_differences": diffs[:5],
        "ordered": ordered,
    }


def _show(row: tuple) -> list:
    return [jsonable(v) if not isinstance(v, tuple) else str(v) for v in row]


# --- running ------------------------------------------------------------------------------------


@dataclass
class SideRun:
    wall_s: float = 0.0
    spark_cpu_s: float | None = None
    source_cpu_s: float | None = None
    rows: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        r = lambda v: None if v is None else round(v, 4)  # noqa: E731
        return {"wall_s": r(self.wall_s), "spark_cpu_s": r(self.spark_cpu_s), "source_cpu_s": r(self.source_cpu_s),
                "rows": self.rows, "error": self.error}


def _delta(after, before):
    return None if after is None or before is None else max(0.0, after - before)


def run_side(spark, sql: str, spark_cpu, pg_cpu) -> tuple[SideRun, list | None, list | None]:
    side = SideRun()
    c0, p0, t0 = spark_cpu.read(), pg_cpu.read(), time.perf_counter()
    try:
        df = spark.sql(sql)
        rows = df.collect()
        schema = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    except Exception as e:  # noqa: BLE001 - a failing query is a result, not a crash
        rows, schema = None, None
        side.error = _first_line(e)
    side.wall_s = time.perf_counter() - t0
    side.spark_cpu_s, side.source_cpu_s = _delta(spark_cpu.read(), c0), _delta(pg_cpu.read(), p0)
    side.rows = len(rows) if rows is not None else 0
    return side, rows, schema


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip() and not line.startswith(("JVM stacktrace", "\tat ")):
            return f"{type(e).__name__}: {line.strip()}"[:2000]
    return type(e).__name__


def run_replay(cfg: HtapConfig, paths: list[str], opts: ReplayOptions, spark=None) -> int:
    """Replay the log; writes replay.json and replay.junit.xml under `opts.out`; the exit status."""
    started = time.time()
    source = cfg.source(opts.source)
    statements = read_log(paths)
    with MetadataStore(cfg.metadata) as store:
        tables = store.list_tables(source.name)
    patterns, dropped, duplicates = classify(statements, Resolver(tables, opts.schema))
    if opts.max_queries is not None:
        patterns = patterns[: opts.max_queries]
    print(
        f"{len(statements)} statements: {len(patterns)} patterns to replay, {duplicates} differing only in literals,"
        f" {len(dropped)} dropped",
        file=sys.stderr,
    )
    for d in dropped:
        print(f"  dropped {d.statement.origin}: {d.reason}", file=sys.stderr)
    names = (REPLICA_CATALOG, SOURCE_CATALOG)
    if spark is None:
        spark = _session(cfg, opts)
    else:  # a session of the caller's: catalogs are cached per name, so new names per run
        import uuid

        token = uuid.uuid4().hex[:8]
        names = (f"{REPLICA_CATALOG}_{token}", f"{SOURCE_CATALOG}_{token}")
    spark_cpu, pg_cpu = SparkCpu(spark), SourceCpu(open_queryable(source))
    results = []
    with ExportedSnapshot(source) as snap:
        needed = sorted({name for p in patterns for name in p.tables})
        with MetadataStore(cfg.metadata) as store:
            by_name = {t.qualified_name: t for t in store.list_tables(source.name)}
            for name in needed:
                wait_for_seq(store, by_name[name], snap.seq, opts.wait_s)
        _catalogs(spark, cfg, opts, snap, names)
        _warm_up(spark, needed, names)
        for i, p in enumerate(patterns, 1):
            results.append(_replay_one(spark, p, opts, spark_cpu, pg_cpu, names))
            r = results[-1]
            print(f"[{i}/{len(patterns)}] {r['status']:<8} {p.fingerprint} replica {r['replica']['wall_s']:.2f}s"
                  f" source {r['source']['wall_s']:.2f}s  {p.statement.origin}", file=sys.stderr)
        snapshot = snap.to_dict()
    report = _report(source.name, snapshot, started, statements, patterns, dropped, duplicates, results, spark_cpu, pg_cpu)
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "replay.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    write_junit(report, opts.out / "replay.junit.xml")
    bad = [r for r in results if r["status"] != "agree"]
    print(
        f"replay at seq {snapshot['seq']} ({snapshot['seq_position']}): {len(results) - len(bad)} of {len(results)} patterns agree"
        + (f", {len(bad)} do not" if bad else "")
        + f"; report {opts.out / 'replay.json'}, JUnit {opts.out / 'replay.junit.xml'}"
    )
    for r in bad:
        print(f"  {r['status'].upper()} {r['fingerprint']} {r['origin']}: {r['message']}")
    if not results:
        print("no query to replay: nothing was verified", file=sys.stderr)
        return 1
    return 1 if bad else 0


def _session(cfg: HtapConfig, opts: ReplayOptions):
    spark = spark_session(
        REPLICA_CATALOG, cfg.path, opts.source, master=opts.spark_master, **{"spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _catalogs(spark, cfg: HtapConfig, opts: ReplayOptions, snap, names: tuple[str, str]) -> None:
    for name, extra in (
        (names[0], {"route": "replica", "as_of_seq": str(snap.seq)}),
        (names[1], {"route": "source", "source_snapshot": snap.exact_name}),
    ):
        spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{name}.config", str(cfg.path))
        if opts.source:
            spark.conf.set(f"spark.sql.catalog.{name}.source", opts.source)
        for key, value in extra.items():
            spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)


def _warm_up(spark, tables: list[str], names: tuple[str, str]) -> None:
    """Start Spark's Python workers before anything is timed."""
    if tables:
        for catalog in names:
            try:
                spark.sql(f"SELECT count(*) FROM {catalog}.{tables[0]}").collect()
            except Exception:  # noqa: BLE001 - the real run reports it
                pass


def _replay_one(spark, p: Pattern, opts: ReplayOptions, spark_cpu, pg_cpu, names: tuple[str, str]) -> dict:
    sql_r, sql_s = in_catalog(p.expression, names[0]), in_catalog(p.expression, names[1])
    rep, rep_rows, rep_schema = run_side(spark, sql_r, spark_cpu, pg_cpu)
    src, src_rows, src_schema = run_side(spark, sql_s, spark_cpu, pg_cpu)
    out = {
        "fingerprint": p.fingerprint,
        "origin": p.statement.origin,
        "occurrences": p.occurrences,
        "duplicates_at": p.origins[1:],
        "pattern": p.normalized,
        "sql": in_catalog(p.expression, "<catalog>"),
        "tables": p.tables,
        "ordered": p.ordered,
        "replica": rep.to_dict(),
        "source": src.to_dict(),
        "diff": None,
    }
    if rep.error or src.error:
        out["status"], out["message"] = "error", f"replica: {rep.error}" if rep.error else f"source: {src.error}"
    elif rep_schema != src_schema:
        out["status"], out["message"] = "mismatch", f"result columns differ: replica {rep_schema}, source {src_schema}"
    else:
        diff = compare(rep_rows, src_rows, p.ordered, opts.float_tolerance)
        if diff is None:
            out["status"], out["message"] = "agree", f"{rep.rows} rows"
        else:
            out["status"], out["diff"] = "mismatch", diff
            out["message"] = (
                f"{diff['differing_rows']} rows differ (replica {diff['replica_rows']} rows, source {diff['source_rows']})"
            )
    return out


def _report(source, snapshot, started, statements, patterns, dropped, duplicates, results, spark_cpu, pg_cpu) -> dict:
    def total(side: str, key: str):
        values = [r[side][key] for r in results if r[side][key] is not None]
        return round(sum(values), 4) if values else None

    return {
        "kind": "htap-verify-replay",
        "source": source,
        "snapshot": snapshot,
        "started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        "duration_s": round(time.time() - started, 3),
        "ok": bool(results) and all(r["status"] == "agree" for r in results),
        "statements": len(statements),
        "patterns": len(patterns),
        "duplicates": duplicates,
        "dropped": [{"origin": d.statement.origin, "reason": d.reason, "sql": d.statement.text[:500]} for d in dropped],
        "counts": {s: sum(1 for r in results if r["status"] == s) for s in ("agree", "mismatch", "error")},
        "totals": {
            side: {k: total(side, k) for k in ("wall_s", "spark_cpu_s", "source_cpu_s")} for side in ("replica", "source")
        },
        "cpu_method": {
            "spark": spark_cpu.method if spark_cpu.pid else f"unavailable: {spark_cpu.reason}",
            "source": pg_cpu.method if pg_cpu.postmaster else f"unavailable: {pg_cpu.reason}",
            "note": "deltas over each run; pg_stat_statements is not used (it needs shared_preload_libraries and"
            " reports execution time, not CPU)",
        },
        "queries": results,
    }


def write_junit(report: dict, path: Path) -> None:
    """JUnit XML: one test case per pattern (failure: mismatch; error: a failed query), dropped
    statements as skipped cases."""
    results = report["queries"]
    suite = ET.Element(
        "testsuite",
        name="htap verify replay",
        tests=str(len(results) + len(report["dropped"])),
        failures=str(report["counts"]["mismatch"]),
        errors=str(report["counts"]["error"]),
        skipped=str(len(report["dropped"])),
        time=f"{report['duration_s']:.3f}",
        timestamp=report["started_at"],
    )
    props = ET.SubElement(suite, "properties")
    for k, v in report["snapshot"].items():
        ET.SubElement(props, "property", name=f"snapshot.{k}", value=str(v))
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"htap.replay.{report['source']}",
            name=f"{r['fingerprint']} {r['origin']}",
            time=f"{(r['replica']['wall_s'] or 0) + (r['source']['wall_s'] or 0):.3f}",
        )
        detail = json.dumps({k: r[k] for k in ("sql", "replica", "source", "diff")}, indent=2, default=str)
        if r["status"] == "mismatch":
            ET.SubElement(case, "failure", message=r["message"], type="mismatch").text = detail
        elif r["status"] == "error":
            ET.SubElement(case, "error", message=r["message"][:500], type="query failed").text = detail
        ET.SubElement(case, "system-out").text = f"{r['sql']}\nreplica {r['replica']}\nsource {r['source']}"
    for d in report["dropped"]:
        case = ET.SubElement(suite, "testcase", classname=f"htap.replay.{report['source']}.dropped", name=d["origin"], time="0")
        ET.SubElement(case, "skipped", message=d["reason"])
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    path.write_text(ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")

