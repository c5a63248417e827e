"""The `htap` command line: set up a replica, add tables, run the service, see its status.

The commands that start Spark or the ingest service (serve, demo, verify, spark-conf) import
what they need when they run, so that `htap --help`, `htap status` and the table commands start
without loading pyspark, DuckDB and the source drivers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
import tomllib
from pathlib import Path

from htap.app.status import SERVED_STATES, service_status, source_statuses, table_statuses
from htap.catalog.properties import set_property
from htap.conf import SOURCE_KINDS, load_config, parse_config, remove_source, render_config, resolve_config_path
from htap.connectors.registry import open_source
from htap.connectors.tables import OVERRIDE_TYPES, apply_overrides, keep_overrides, parse_overrides
from htap.errors import ConfigError, HtapError, SourceError, TableError
from htap.replica.metadata import MetadataStore
from htap.replica.models import KIND_VIEW, Column, encode_schema
from htap.replica.warehouse import open_warehouse

log = logging.getLogger("htap")


def _config(args):
    return load_config(args.config)


def htap_command() -> str:
    """How to run `htap` from the current shell: `htap` when PATH finds this installation's
    script, else that script's path (e.g. `.venv/bin/htap` after `make setup`, whose virtualenv
    is not activated)."""
    script = Path(sys.executable).parent / "htap"
    if not script.is_file():
        return "htap"
    found = shutil.which("htap")
    if found and Path(found).resolve() == script.resolve():
        return "htap"
    try:
        return os.path.relpath(script) if not os.path.relpath(script).startswith("..") else str(script)
    except ValueError:  # another drive (Windows)
        return str(script)


def cmd_init(args) -> int:
    path = resolve_config_path(args.config)
    if path.exists() and not args.force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it, or --config for another file")
    text = render_config(args.source, args.dsn, args.warehouse, kind=args.kind)
    cfg = parse_config(tomllib.loads(text), path)
    open_source(cfg.source(args.source)).check()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    open_warehouse(cfg).create()
    MetadataStore(cfg.metadata, create=True).close()
    print(f"wrote {path}; metadata store {cfg.metadata}")
    htap = htap_command()
    print(f"next: {htap} --config {path} tables add <schema.table>, then {htap} --config {path} serve")
    return 0


def cmd_recover(args) -> int:
    from htap.replica import manifest

    cfg = _config(args)
    sources = [cfg.source(args.source).name] if args.source else list(cfg.sources)
    warehouse = open_warehouse(cfg)
    with MetadataStore(cfg.metadata, create=True) as store:
        if args.force:
            for source in sources:
                manifest.forget(store, source)
        recovered = manifest.recover(warehouse, store, sources, cfg.window_s)
    worst = 0
    for r in recovered:
        print(f"source {r.source}: {r.tables} table(s), {r.deltas} delta(s), position {r.position}"
              f" (manifest written {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(r.written_at))} UTC)")
        if r.missing:
            worst = 1
            print(f"  {len(r.missing)} file(s) missing from {warehouse.location} (their tables are marked unhealthy),"
                  f" e.g. {r.missing[0]}", file=sys.stderr)
    print(f"metadata store {cfg.metadata} rebuilt from {warehouse.location}; `htap serve` resumes streaming from there")
    return worst


def _table_name(text: str) -> tuple[str, str]:
    if "." not in text:
        raise ConfigError(f"name the table as <schema>.<table>, e.g. public.{text}")
    schema, name = text.split(".", 1)
    return schema, name


def cmd_tables_add(args) -> int:
    """Add the named tables, or every table of `--schema` that is not one yet: each is described
    and checked (a line each), then those that can be are added in one metadata transaction.
    A table that cannot be added is an `error:` line; the exit status is 2 when there was one."""
    cfg = _config(args)
    source = cfg.source(args.source)
    if not args.table and not args.schema:
        raise ConfigError("name the tables to add (<schema>.<table> ...) or a whole schema (--schema <schema>)")
    if args.column_type and len(args.table) + bool(args.schema) != 1:
        raise ConfigError("--column-type applies to one table: add that table on its own")
    src = open_source(source)
    store = MetadataStore(cfg.metadata)
    try:
        wanted = [_table_name(t) for t in args.table]
        present = {t.qualified_name for t in store.list_tables(source.name)}
        if args.schema:
            names = src.list_tables(args.schema)
            if not names:
                raise TableError(f"schema {args.schema} of source {source.name} has no tables; check the name")
            fresh = [(args.schema, n) for n in names if f"{args.schema}.{n}" not in present]
            print(f"schema {args.schema}: {len(names)} table(s), {len(names) - len(fresh)} already HTAP tables")
            wanted += [t for t in fresh if t not in wanted]
        ready, failed = [], 0
        for schema, name in wanted:
            try:
                if f"{schema}.{name}" in present:
                    raise TableError(f"{schema}.{name} is already an HTAP table of source {source.name!r}")
                columns, key = src.describe_table(schema, name)
                columns = apply_overrides(columns, parse_overrides(args.column_type), f"{schema}.{name}")
                try:
                    arrow = src.replica_schema(columns)  # every column's fate, decided now
                except TableError as e:
                    raise TableError(f"cannot add {schema}.{name}: {e}") from e
            except TableError as e:
                failed += 1
                print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
                continue
            chosen = "".join(f"; {c.name} as {c.override}" for c in columns if c.override)
            ready.append((schema, name, columns, key, arrow, chosen))
        with store.transaction():  # one metadata round for all of them
            for schema, name, columns, key, arrow, chosen in ready:
                store.add_table(source.name, schema, name, columns, key, encode_schema(arrow))
                print(f"added {schema}.{name} (key: {', '.join(key)}{chosen})")
    finally:
        store.close()
    if ready:
        print(f"{len(ready)} table(s) added; `htap serve` copies them and keeps them fresh")
    return 2 if failed else 0


def cmd_tables_recopy(args) -> int:
    cfg = _config(args)
    source = cfg.source(args.source)
    schema, name = _table_name(args.table)
    src = open_source(source)
    with MetadataStore(cfg.metadata) as store:
        table = store.get_table(source.name, schema, name)
        described, _key = src.describe_table(schema, name)
        columns = apply_overrides(keep_overrides(described, table.columns), parse_overrides(args.column_type), args.table)
        try:
            src.replica_schema(columns)
        except TableError as e:
            raise TableError(f"cannot copy {schema}.{name} again: {e}") from e
        store.resync(table.id, "copying again (htap tables recopy)", columns)
    chosen = "".join(f"; {c.name} as {c.override}" for c in columns if c.override)
    print(f"{schema}.{name} (was {table.state}) will be copied again{chosen}: a running `htap serve` starts within seconds")
    return 0


def cmd_tables_recheck(args) -> int:
    from htap.replica.health import recheck  # reads Parquet

    cfg = _config(args)
    source = cfg.source(args.source)
    schema, name = _table_name(args.table)
    with MetadataStore(cfg.metadata) as store:
        result = recheck(open_warehouse(cfg), store, store.get_table(source.name, schema, name))
    print(f"{schema}.{name}: {result.was} -> {result.now}: {result.detail}")
    return 0 if result.now != "unhealthy" else 1


def cmd_tables_remove(args) -> int:
    from htap.replica.deltas import table_dir  # loads DuckDB

    cfg = _config(args)
    source = cfg.source(args.source)
    schema, name = _table_name(args.table)
    with MetadataStore(cfg.metadata) as store:
        table = store.get_table(source.name, schema, name)
        views = store.views_using(table)
        if views:
            raise TableError(f"views {', '.join(v.name for v in views)} aggregate {schema}.{name}: drop them first"
                             f" (`htap views drop <name>`)")
        try:
            print(open_source(source).unpublish(schema, name))
        except SourceError as e:
            print(f"warning: {e}; the source may still log the table's changes for the replica", file=sys.stderr)
        store.remove_table(table.id)
    open_warehouse(cfg).delete_tree(table_dir(table))
    print(f"removed {schema}.{name} from source {source.name}: its metadata and delta files are gone")
    return 0


VIEW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def cmd_views_create(args) -> int:
    from htap.replica.view_bases import joined_schema  # loads DuckDB
    from htap.replica.view_maintenance import GROUP_KEY, ViewShape, view_schema
    from htap.rewrite.views import parse_view

    if not VIEW_NAME.fullmatch(args.name):
        raise ConfigError(f"a view's name is letters, digits and _ (not starting with a digit), not {args.name!r}")
    cfg = _config(args)
    source = cfg.source(args.source)
    with MetadataStore(cfg.metadata) as store:
        tables = {t.qualified_name: t for t in store.list_tables(source.name)}
        definition = parse_view(args.sql, {name: t.arrow_schema for name, t in tables.items()},
                                {name: tuple(t.key) for name, t in tables.items()})
        base = tables[definition.table]
        shape = ViewShape.of(definition, base.key)
        joined = joined_schema(shape, base.arrow_schema, [(d, tables[d.table].arrow_schema) for d in definition.dimensions])
        schema = view_schema(shape, joined)
        columns = [Column(f.name, str(f.type), f.name != GROUP_KEY) for f in schema]
        view = store.add_view(base, args.name, args.sql, definition, columns, [GROUP_KEY], encode_schema(schema))
    joins = "".join(f" joined with {d.table}" for d in definition.dimensions)
    print(f"view {view.table.qualified_name} of {base.qualified_name}{joins} defined: a running `htap serve` builds it"
          f" from the tables at its next checkpoint, then keeps it at every checkpoint")
    return 0


def cmd_views_list(args) -> int:
    cfg = _config(args)
    with MetadataStore(cfg.metadata) as store:
        for v in store.list_views():
            base = store.table_by_id(v.base_id)
            seq = "" if v.table.max_safe_seq is None else f"\tseq={v.table.max_safe_seq}"
            error = f"\t{v.table.error}" if v.table.error else ""
            print(f"{v.table.source}\t{v.table.qualified_name}\t{v.table.state}\tof {base.qualified_name}{seq}\t{v.sql}{error}")
    return 0


def cmd_views_drop(args) -> int:
    from htap.replica.deltas import table_dir  # loads DuckDB

    cfg = _config(args)
    source = cfg.source(args.source)
    with MetadataStore(cfg.metadata) as store:
        view = store.get_view(source.name, args.name)
        store.remove_table(view.table.id)
    open_warehouse(cfg).delete_tree(table_dir(view.table))
    print(f"dropped view {view.table.qualified_name} of source {source.name}: its metadata and delta files are gone")
    return 0


def cmd_views_rebuild(args) -> int:
    cfg = _config(args)
    source = cfg.source(args.source)
    with MetadataStore(cfg.metadata) as store:
        view = store.get_view(source.name, args.name)
        store.resync(view.table.id, "building again (htap views rebuild)")
    print(f"view {view.table.qualified_name} (was {view.table.state}) will be built again from its table at the next"
          f" checkpoint of a running `htap serve`")
    return 0


def cmd_sources_drop(args) -> int:
    from htap.replica.deltas import table_dir  # loads DuckDB
    from htap.replica.manifest import manifest_path

    cfg = _config(args)
    source = cfg.source(args.source)
    for line in open_source(source).drop():  # fails (naming the process) while `htap serve` streams it
        print(line)
    with MetadataStore(cfg.metadata) as store:
        tables = sorted(store.list_tables(source.name, views=True), key=lambda t: t.kind != KIND_VIEW)  # views first
        for table in tables:
            store.remove_table(table.id)
            open_warehouse(cfg).delete_tree(table_dir(table))
        store.forget_source(source.name)
    open_warehouse(cfg).delete_tree(source.name)
    open_warehouse(cfg).delete(manifest_path(source.name))  # `htap recover` must not bring it back
    cfg.path.write_text(remove_source(cfg.path.read_text(), source.name, cfg.path))
    print(f"removed {len(tables)} table(s) of source {source.name} and its section [sources.{source.name}] of {cfg.path}")
    return 0


def cmd_tables_list(args) -> int:
    cfg = _config(args)
    store = MetadataStore(cfg.metadata)
    try:
        for t in store.list_tables():
            print(f"{t.source}\t{t.qualified_name}\t{t.state}\tkey=({', '.join(t.key)})")
    finally:
        store.close()
    return 0


def cmd_failover(args) -> int:
    cfg = _config(args)
    source = cfg.source(args.source)
    schema, name = _table_name(args.table)
    with MetadataStore(cfg.metadata) as store:
        set_property(store, store.get_table(source.name, schema, name), "htap.failover", "true" if args.state == "on" else "false")
    where = "the source" if args.state == "on" else "the replica (when healthy and fresh)"
    print(f"{args.table}: failover {args.state}; reads now go to {where}")
    return 0


def cmd_serve(args) -> int:
    from htap.ingest.health import ServiceState
    from htap.ingest.service import serve  # loads DuckDB and the source drivers

    cfg = _config(args)
    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("received %s: finishing the current checkpoint and stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    state = ServiceState()
    metrics = None
    if cfg.service.metrics_endpoint is not None:
        from htap.app.metrics import MetricsServer

        metrics = MetricsServer(cfg, state)  # fails before anything starts when the address is taken
        log.info("metrics on %s/metrics, health on %s/health", metrics.url, metrics.url)
    log.info("serving %d source(s) from %s", len(cfg.sources), cfg.path)
    try:
        serve(cfg, stop, state=state)
    finally:
        if metrics is not None:
            metrics.close()
    log.info("stopped")
    return 0


def cmd_status(args) -> int:
    cfg = _config(args)
    service = service_status(cfg)
    statuses = table_statuses(cfg)
    sources = source_statuses(cfg)
    if args.json:
        print(json.dumps({"service": service.to_dict(), "sources": [s.to_dict() for s in sources],
                          "tables": [s.to_dict() for s in statuses]}, indent=2))
        return 0
    if service.running:
        print("service: running (" + ", ".join(f"{s['id']}, heartbeat {time.time() - s['beat_at']:.0f} s ago"
                                              for s in service.services) + ")")
    else:
        last = ("no service has run" if service.last_beat_s is None
                else f"last heartbeat {service.last_beat_s:.0f} s ago, from {service.last_service}")
        print(f"service: NOT running ({last}): no table is copied or kept fresh until"
              f" `{htap_command()} --config {cfg.path} serve` runs; their state is shown as `stopped`")
    for src in sources:
        lag = "-" if src.lag_s is None else f"{src.lag_s:.1f} s"
        print(f"source {src.source} ({src.kind}): position {src.position_text or '-'}, lag {lag}, "
              f"{src.tables} tables, {src.failed} failed, {src.unhealthy} unhealthy")
        if src.visible is not None:
            print(f"    visible {src.visible_text} (changes readable with spark.htap.readTail; the service's tail holds"
                  f" {src.tail_bytes or 0:,} bytes)")
        if src.retention:
            print(f"    {src.retention}")
    print(f"{'table':<32} {'state':<12} {'rows':>10} {'parts':>5} {'deltas':>6} {'max safe position':>22} {'delay s':>8}  route")
    for s in statuses:
        rows = "-" if s.rows is None else str(s.rows)
        delay = "-" if s.delay_s is None else f"{s.delay_s:.1f}"
        route = "failover on" if s.failover else (s.last_route or "-").split(":")[0]
        state = "stopped" if not service.running and s.state in SERVED_STATES else s.state
        print(f"{s.source + '.' + s.table:<32} {state:<12} {rows:>10} {s.partitions:>5} {s.deltas:>6} {s.max_safe_position or '-':>22} {delay:>8}  {route}")
        if s.error:
            print(f"    error: {s.error}")
    return 0


def cmd_spark_conf(args) -> int:
    from htap.catalog.shim import spark_conf  # compiles the Java shim

    cfg = _config(args)  # a missing or broken file is an error here, not in the first Spark query
    catalog = args.catalog or cfg.source(args.source).name
    conf = spark_conf(catalog, cfg.path, args.source)
    print("# Spark settings for spark-htap (spark-submit / pyspark flags):")
    for key, value in conf.items():
        print(f"--conf {key}={value}")
    print(f"# executors must run a Python with spark-htap installed: export PYSPARK_PYTHON={conf['spark.pyspark.python']}")
    print(f"# then: SELECT ... FROM {catalog}.<schema>.<table>")
    return 0


def cmd_demo(args) -> int:
    from htap.app.demo import run_demo, stop_private_postgres  # starts Spark

    return stop_private_postgres() if args.stop else run_demo(args.dsn)


def cmd_verify_data(args) -> int:
    from htap.verify.data import DataOptions, verify_data  # DuckDB and Postgres
    from htap.verify.expectations import write_validations

    cfg = _config(args)
    opts = DataOptions(
        source=args.source,
        parallelism=args.parallelism,
        max_rows_per_second=args.max_rows_per_second,
        range_rows=args.range_rows,
        max_report_rows=args.max_report_rows,
        wait_s=args.wait,
        mark_unhealthy=args.mark_unhealthy,
    )
    report = verify_data(cfg, args.tables, opts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "data.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    suites = write_validations(report, out / "expectations")
    snap = report["snapshot"]
    print(f"snapshot: source {snap['source_snapshot']} = replica seq {snap['seq']} ({snap['seq_position']})")
    for t in report["tables"]:
        if t["error"]:
            status = f"ERROR {t['error']}"
        elif t["ok"]:
            status = "ok"
        else:
            status = f"MISMATCH {t['missing_count']} missing, {t['extra_count']} extra, {t['different_count']} different"
            if t["marked_unhealthy"]:
                status += " (marked unhealthy: reads fail over to the source)"
        print(f"{t['table']:<40} {t['source_rows']:>10} rows {t['ranges']:>5} ranges  {status}")
        for kind in ("missing", "extra"):
            for key in t[kind][:10]:
                print(f"    {kind}: {json.dumps(key)}")
        for d in t["different"][:10]:
            print(f"    different: {json.dumps(d['key'])} columns {[c['column'] for c in d['columns']]}")
    for v in report["views"]:
        status = f"ERROR {v['error']}" if v["error"] else "ok" if v["ok"] else (
            f"MISMATCH {v['missing_count']} missing, {v['extra_count']} extra, {v['different_count']} different groups")
        print(f"{v['view']:<40} {v['groups']:>10} groups of {v['table']}  {status}")
        for kind in ("missing", "extra", "different"):
            for g in v[kind][:10]:
                print(f"    {kind}: {json.dumps(g, default=str)}")
    print(f"report: {out / 'data.json'}; validation results: {len(suites)} suite(s) in {out / 'expectations'}")
    return 0 if report["ok"] else 1


def cmd_verify_replay(args) -> int:
    from htap.verify.replay import ReplayOptions, run_replay  # starts Spark

    cfg = _config(args)
    opts = ReplayOptions(
        source=args.source,
        schema=args.schema,
        out=Path(args.out),
        float_tolerance=args.float_tolerance,
        wait_s=args.wait,
        max_queries=args.max_queries,
    )
    return run_replay(cfg, args.queries, opts)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="htap",
        description="spark-htap: CDC-fed columnar replicas of Postgres and MySQL/MariaDB tables (directly or through"
        " Debezium events), read by ordinary Spark SQL. Start with `htap init`, then `htap tables add` and `htap serve`.",
    )
    p.add_argument("--config", help="config file (default: $HTAP_CONFIG or ./htap.toml)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "init",
        help="write a config, create the metadata store, check the source",
        description="Checks that the source is reachable and set up for CDC, writes a config file naming it"
        " (--config, else $HTAP_CONFIG, else ./htap.toml), and creates the warehouse folder and the metadata store."
        " Next: `htap tables add <schema.table>`, then `htap serve`.",
    )
    s.add_argument(
        "--dsn",
        required=True,
        help="the source: a libpq connection string (postgres), mysql://user:password@host:port/database (mysql),"
        " or a file/folder of events or kafka://host:port/<topic prefix> (debezium)",
    )
    s.add_argument("--kind", default="postgres", choices=SOURCE_KINDS, help="source kind (default: postgres)")
    s.add_argument("--source", default="main", help="name of the source (default: main)")
    s.add_argument("--warehouse", default="warehouse", help="folder for deltas, relative to the config")
    s.add_argument("--force", action="store_true", help="overwrite an existing config file")
    s.set_defaults(func=cmd_init)

    t = sub.add_parser("tables", help="manage HTAP tables").add_subparsers(dest="tables_command", required=True, metavar="ACTION")
    a = t.add_parser(
        "add",
        help="mark source tables as HTAP tables (copied by `htap serve`)",
        description="Checks each named table (or every table of --schema that is not an HTAP table yet) in the"
        " source, then adds those that can be replicated in one metadata transaction, a line each. A table that"
        " cannot be added (missing, no primary key, a type without a replica type) is an `error:` line and the"
        " exit status is 2; the others are still added.",
    )
    a.add_argument("table", nargs="*", help="<schema>.<table> (several may be given)")
    a.add_argument("--schema", help="add every table of this source schema that is not an HTAP table yet")
    a.add_argument("--source", help="source name (default: the only one)")
    column_type_help = (f"give a column another replica type than its source type's own (repeatable): {OVERRIDE_TYPES};"
                        " for source types no replica type holds exactly (e.g. numeric without a precision)")
    a.add_argument("--column-type", action="append", metavar="COLUMN=TYPE", help=column_type_help)
    a.set_defaults(func=cmd_tables_add)
    r = t.add_parser("recopy", help="copy a table again (a failed table after its cause was fixed)")
    r.add_argument("table", help="<schema>.<table>")
    r.add_argument("--source", help="source name (default: the only one)")
    r.add_argument("--column-type", action="append", metavar="COLUMN=TYPE", help=column_type_help)
    r.set_defaults(func=cmd_tables_recopy)
    rc = t.add_parser("recheck", help="check an unhealthy table's delta files; healthy again if all are intact")
    rc.add_argument("table", help="<schema>.<table>")
    rc.add_argument("--source", help="source name (default: the only one)")
    rc.set_defaults(func=cmd_tables_recheck)
    rm = t.add_parser("remove", help="stop replicating a table: drop it from the publication, the metadata and its files")
    rm.add_argument("table", help="<schema>.<table>")
    rm.add_argument("--source", help="source name (default: the only one)")
    rm.set_defaults(func=cmd_tables_remove)
    ls = t.add_parser("list", help="list HTAP tables")
    ls.set_defaults(func=cmd_tables_list)

    vw = sub.add_parser("views", help="manage derived views (aggregates the replica keeps current)").add_subparsers(
        dest="views_command", required=True, metavar="ACTION")
    c = vw.add_parser(
        "create",
        help="define an aggregate view of an HTAP table, kept current at every checkpoint",
        description="SQL: SELECT <group columns>, <SUM/COUNT/COUNT(*)/AVG/MIN/MAX of columns> FROM <schema>.<table>"
        " [JOIN <schema>.<dimension> ON <columns = its primary key> ...] [WHERE <column comparisons with literals>]"
        " GROUP BY <group columns>. What cannot be kept exactly (DISTINCT, float sums, expressions, outer joins,"
        " HAVING, ...) is refused with the reason. A running `htap serve` builds the"
        " view from the table at its next checkpoint and keeps it in the same metadata transaction as the table's"
        " changes from then on; it is stored as the replica table views.<name> (its groups' states by a `_group` key).",
    )
    c.add_argument("name", help="the view's name (letters, digits, _)")
    c.add_argument("--sql", required=True, help="the view's SELECT (Spark SQL)")
    c.add_argument("--source", help="source name (default: the only one)")
    c.set_defaults(func=cmd_views_create)
    vl = vw.add_parser("list", help="list views: source, name, state, base table, seq, SQL (and an error)")
    vl.set_defaults(func=cmd_views_list)
    vd = vw.add_parser("drop", help="drop a view: its metadata and delta files")
    vd.add_argument("name")
    vd.add_argument("--source", help="source name (default: the only one)")
    vd.set_defaults(func=cmd_views_drop)
    vr = vw.add_parser("rebuild", help="build a view again from its table (a failed view, after its cause was fixed)")
    vr.add_argument("name")
    vr.add_argument("--source", help="source name (default: the only one)")
    vr.set_defaults(func=cmd_views_rebuild)

    so = sub.add_parser("sources", help="manage sources").add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    d = so.add_parser("drop", help="stop replicating a source: drop its slot and publication, remove its tables and its config section")
    d.add_argument("source", help="source name")
    d.set_defaults(func=cmd_sources_drop)

    f = sub.add_parser("failover", help="route reads of a table to its source (on) or back to the replica (off)")
    f.add_argument("table", help="<schema>.<table>")
    f.add_argument("state", choices=["on", "off"])
    f.add_argument("--source", help="source name (default: the only one)")
    f.set_defaults(func=cmd_failover)

    s = sub.add_parser("recover", help="rebuild a lost metadata store from the manifests in the warehouse",
                       description="Rebuilds the metadata of each configured source (tables, partitions, deltas, seqs,"
                       " the source position) from the manifests `htap serve` writes to the warehouse at every"
                       " checkpoint. Then `htap serve` resumes streaming from the recovered position."
                       " Exit status 0: recovered; 1: recovered, but files are missing (tables marked unhealthy).")
    s.add_argument("--source", help="recover only this source (default: every configured source)")
    s.add_argument("--force", action="store_true", help="replace what the metadata store already has of the source(s)")
    s.set_defaults(func=cmd_recover)

    s = sub.add_parser(
        "serve",
        help="run the ingest service (copy, then stream changes) until stopped",
        description="Runs the ingest service in the foreground until SIGTERM or Ctrl-C: copies each new HTAP table,"
        " then streams the sources' changes into the replica, compacts its deltas and keeps the safe positions"
        " Spark reads at. One `htap serve` per config; `htap status` shows whether it runs.",
    )
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser(
        "status",
        help="whether `htap serve` runs; per source: position, lag, failed tables, retained log; per table: state,"
        " rows, partitions, deltas, max safe seq, delay, errors",
        description="Reads the metadata store (no service needed): whether `htap serve` runs, then per source its"
        " position, lag, failed and unhealthy tables and the log the source retains for it, and per table its state,"
        " rows, partitions, deltas, max safe position, delay and last error.",
    )
    s.add_argument("--json", action="store_true", help='machine-readable output: {"sources": [...], "tables": [...]}')
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("spark-conf", help="print the Spark settings that expose HTAP tables as a catalog",
                       description="Prints the --conf flags of spark-submit / pyspark that read the HTAP tables of"
                       " a source of the config as <catalog>.<schema>.<table>. The config file must exist.")
    s.add_argument("--catalog", help="Spark catalog name (default: the source's name, as `htap demo` uses it)")
    s.add_argument("--source", help="source name (default: the only one)")
    s.set_defaults(func=cmd_spark_conf)

    v = sub.add_parser("verify", help="prove the replica right: compare data, replay queries (CI step)")
    vs = v.add_subparsers(dest="verify_command", required=True, metavar="CHECK")
    d = vs.add_parser(
        "data",
        help="compare every row of the source with the replica at one exact snapshot, by key ranges",
        description="Compares every row of each HTAP table with its source at one exported source snapshot"
        " (= one replica seq) while writes go on. Exit status 0: identical; 1: differences (listed by key).",
    )
    d.add_argument("tables", nargs="*", help="<schema>.<table> (default: every HTAP table of the source)")
    d.add_argument("--source", help="source name (default: the only one)")
    d.add_argument("--parallelism", type=int, default=2, help="source connections at once (default: 2)")
    d.add_argument("--max-rows-per-second", type=float, default=None, help="source rows scanned per second (default: no limit)")
    d.add_argument("--range-rows", type=int, default=50_000, help="rows per hashed key range (default: 50000)")
    d.add_argument("--max-report-rows", type=int, default=100, help="keys listed per kind of difference and table (default: 100)")
    d.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the replica to reach the snapshot (default: 60)")
    d.add_argument("--mark-unhealthy", action="store_true", help="mark a table that differs unhealthy, so reads fail over to the source")
    d.add_argument("--out", default="htap-verify", help="folder for data.json and expectations/<suite>.json (default: htap-verify)")
    d.set_defaults(func=cmd_verify_data)
    r = vs.add_parser(
        "replay",
        help="replay a query log through Spark on the replica and on the source at one snapshot; compare",
        description="Runs one query per pattern of a query log through Spark twice, on the replica and on the source at"
        " the same snapshot, and compares the results. Exit status 0: all agree; 1: a mismatch or a failed query.",
    )
    r.add_argument("queries", nargs="+", help="a .sql file of ;-separated statements, or a folder of them")
    r.add_argument("--source", help="source name (default: the only one)")
    r.add_argument("--schema", help="schema of unqualified table names (default: the HTAP table's, when its name is unique)")
    r.add_argument("--float-tolerance", type=float, default=1e-9, help="relative tolerance for floating point values (default: 1e-9)")
    r.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the replica to reach the snapshot (default: 60)")
    r.add_argument("--max-queries", type=int, default=None, help="run at most this many patterns")
    r.add_argument("--out", default="htap-verify", help="folder for replay.json and replay.junit.xml (default: htap-verify)")
    r.set_defaults(func=cmd_verify_replay)

    s = sub.add_parser("demo", help="end-to-end demo: sample table, service, Spark SQL, a live change")
    s.add_argument("--dsn", default=None, help="Postgres to use (default: local 127.0.0.1:5432, user postgres, db test)")
    s.add_argument("--stop", action="store_true", help="stop the private Postgres an earlier demo started in ./.htap-demo/pg")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return args.func(args)
    except HtapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
