"""The `htap` command line: set up a replica, add tables, run the service, see its status."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from htap.errors import HtapError

log = logging.getLogger("htap")


def _config(args):
    from htap.conf import load_config

    return load_config(args.config)


def cmd_init(args) -> int:
    from htap.conf import parse_config, render_config, resolve_config_path
    from htap.connectors.registry import open_source
    from htap.errors import ConfigError
    from htap.replica.metadata import MetadataStore

    path = resolve_config_path(args.config)
    if path.exists() and not args.force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it, or --config for another file")
    dsn = args.dsn
    if args.kind == "debezium" and not dsn.startswith("kafka://"):
        dsn = str(Path(dsn).resolve())  # a file or folder of events, named from where the command runs
    text = render_config(args.source, dsn, args.warehouse, kind=args.kind)
    import tomllib

    cfg = parse_config(tomllib.loads(text), path)
    open_source(cfg.source(args.source)).check()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    cfg.warehouse.mkdir(parents=True, exist_ok=True)
    MetadataStore(cfg.metadata, create=True).close()
    print(f"wrote {path}; metadata store {cfg.metadata}")
    print(f"next: htap --config {path} tables add <schema.table>, then htap --config {path} serve")
    return 0


def cmd_tables_add(args) -> int:
    from htap.connectors.registry import open_source
    from htap.errors import ConfigError
    from htap.replica.metadata import MetadataStore
    from htap.replica.models import encode_schema
    import pyarrow as pa

    cfg = _config(args)
    source = cfg.source(args.source)
    if "." not in args.table:
        raise ConfigError(f"name the table as <schema>.<table>, e.g. public.{args.table}")
    schema, name = args.table.split(".", 1)
    src = open_source(source)
    columns, key = src.describe_table(schema, name)
    arrow = pa.schema([pa.field(c.name, src.arrow_type(c.source_type)) for c in columns])
    store = MetadataStore(cfg.metadata)
    try:
        store.add_table(source.name, schema, name, columns, key, encode_schema(arrow))
    finally:
        store.close()
    print(f"added {schema}.{name} (key: {', '.join(key)}); `htap serve` copies it and keeps it fresh")
    return 0


def cmd_tables_list(args) -> int:
    from htap.replica.metadata import MetadataStore

    cfg = _config(args)
    store = MetadataStore(cfg.metadata)
    try:
        for t in store.list_tables():
            print(f"{t.source}\t{t.qualified_name}\t{t.state}\tkey=({', '.join(t.key)})")
    finally:
        store.close()
    return 0


def cmd_failover(args) -> int:
    from htap.catalog.bridge import set_property
    from htap.errors import ConfigError
    from htap.replica.metadata import MetadataStore

    cfg = _config(args)
    source = cfg.source(args.source)
    if "." not in args.table:
        raise ConfigError(f"name the table as <schema>.<table>, e.g. public.{args.table}")
    schema, name = args.table.split(".", 1)
    with MetadataStore(cfg.metadata) as store:
        set_property(store, store.get_table(source.name, schema, name), "htap.failover", "true" if args.state == "on" else "false")
    where = "the source" if args.state == "on" else "the replica (when healthy and fresh)"
    print(f"{args.table}: failover {args.state}; reads now go to {where}")
    return 0


def cmd_serve(args) -> int:
    from htap.replica.service import serve

    cfg = _config(args)
    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("received %s: finishing the current checkpoint and stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("serving %d source(s) from %s", len(cfg.sources), cfg.path)
    serve(cfg, stop)
    log.info("stopped")
    return 0


def cmd_status(args) -> int:
    from htap.status import table_statuses

    statuses = table_statuses(_config(args))
    if args.json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
        return 0
    header = f"{'table':<32} {'state':<12} {'rows':>10} {'deltas':>6} {'max safe lsn':>14} {'delay s':>8}"
    print(header)
    for s in statuses:
        rows = "-" if s.rows is None else str(s.rows)
        delay = "-" if s.delay_s is None else f"{s.delay_s:.1f}"
        print(f"{s.source + '.' + s.table:<32} {s.state:<12} {rows:>10} {s.deltas:>6} {s.max_safe_lsn or '-':>14} {delay:>8}")
        if s.error:
            print(f"    error: {s.error}")
    return 0


def cmd_spark_conf(args) -> int:
    from htap.catalog.shim import spark_conf
    from htap.conf import resolve_config_path

    cfg_path = resolve_config_path(args.config)
    conf = spark_conf(args.catalog, cfg_path, args.source)
    print("# Spark settings for spark-htap (spark-submit / pyspark flags):")
    for key, value in conf.items():
        print(f"--conf {key}={value}")
    print(f"# executors must run a Python with spark-htap installed: export PYSPARK_PYTHON={conf['spark.pyspark.python']}")
    print(f"# then: SELECT ... FROM {args.catalog}.<schema>.<table>")
    return 0


def cmd_demo(args) -> int:
    from htap.demo import run_demo

    return run_demo(args.dsn)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="htap",
        description="spark-htap: CDC-fed columnar replicas of Postgres tables, read by ordinary Spark SQL.",
    )
    p.add_argument("--config", help="config file (default: $HTAP_CONFIG or ./htap.toml)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("init", help="write a config, create the metadata store, check the source")
    s.add_argument(
        "--dsn",
        required=True,
        help="the source: a libpq connection string (postgres), mysql://user:password@host:port/database (mysql),"
        " or a file/folder of events or kafka://host:port/<topic prefix> (debezium)",
    )
    s.add_argument("--kind", default="postgres", choices=("postgres", "mysql", "debezium"), help="source kind (default: postgres)")
    s.add_argument("--source", default="main", help="name of the source (default: main)")
    s.add_argument("--warehouse", default="warehouse", help="folder for deltas, relative to the config")
    s.add_argument("--force", action="store_true", help="overwrite an existing config file")
    s.set_defaults(func=cmd_init)

    t = sub.add_parser("tables", help="manage HTAP tables").add_subparsers(dest="tables_command", required=True, metavar="ACTION")
    a = t.add_parser("add", help="mark a source table as an HTAP table (copied by `htap serve`)")
    a.add_argument("table", help="<schema>.<table>")
    a.add_argument("--source", help="source name (default: the only one)")
    a.set_defaults(func=cmd_tables_add)
    ls = t.add_parser("list", help="list HTAP tables")
    ls.set_defaults(func=cmd_tables_list)

    f = sub.add_parser("failover", help="route reads of a table to its source (on) or back to the replica (off)")
    f.add_argument("table", help="<schema>.<table>")
    f.add_argument("state", choices=["on", "off"])
    f.add_argument("--source", help="source name (default: the only one)")
    f.set_defaults(func=cmd_failover)

    s = sub.add_parser("serve", help="run the ingest service (copy, then stream changes) until stopped")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("status", help="per table: state, rows, deltas, max safe seq, delay")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("spark-conf", help="print the Spark settings that expose HTAP tables as a catalog")
    s.add_argument("--catalog", default="htap", help="Spark catalog name (default: htap)")
    s.add_argument("--source", help="source name (default: the only one)")
    s.set_defaults(func=cmd_spark_conf)

    s = sub.add_parser("demo", help="end-to-end demo: sample table, service, Spark SQL, a live change")
    s.add_argument("--dsn", default=None, help="Postgres to use (default: local 127.0.0.1:5432, user postgres, db test)")
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
