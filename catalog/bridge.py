"""Catalog calls the Java shim makes in Python: `python -m htap.catalog.bridge ...`.

Two ways to run it. One call per process (`... --config C list-tables`; what a person or a
script uses), or, as the shim does, one long-lived process per driver (`... --serve`, see
`serve`): a Python process start with these imports costs ~0.7 s of CPU, and the driver's lease
renewals and releases ran one per query. In both, a call's answer is the same.

Answers on stdout as JSON. Failures are one line on stderr and an exit code the shim maps to
Spark's exceptions: EXIT_NO_SUCH_TABLE (NoSuchTableException), EXIT_ERROR (a user error: bad
property, unknown option; IllegalArgumentException), anything else a bug (a traceback). Kept
tiny: the shim uses it for SHOW TABLES, a table's schema and statistics (loadTable, once per
table and query: a Python planning worker round trip before) and ALTER TABLE ... SET
TBLPROPERTIES, to plan a scan's read (`plan-read`, instead of a round trip to Spark's planning
worker: htap.pushdown.read_planning), and, from the
driver's HtapQueryListener, for what executors must not do themselves because they never write
the metadata store: renewing and releasing a running query's leases, and marking a table whose
delta a task found damaged (after checking the file here). Never on a task's read path.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import sys
import traceback

from htap.catalog.properties import set_property
from htap.conf import SPARK_CONFIG_HINT, HtapConfig, cached_config
from htap.connectors.registry import open_queryable, open_source
from htap.errors import DAMAGE_PREFIX, ConfigError, DamagedReplicaError, HtapError, NoSuchTableError
from htap.pushdown import plan_check, source_snapshot
from htap.pushdown.spark_types import TimeTravel, table_answer
from htap.pushdown.system_tables import SCHEMAS, SYSTEM_SCHEMA
from htap.replica.health import damaged, file_damage, mark_damaged
from htap.replica.leases import release_queries, renew_queries
from htap.replica.metadata import MetadataStore
from htap.replica.warehouse import open_warehouse

EXIT_ERROR = 2
EXIT_NO_SUCH_TABLE = 3  # keep in sync with Bridge.java
EXIT_PERMISSION_DENIED = 4  # plan-read: the source refused the reader's role (SecurityException)
EXIT_BUG = 1  # an unexpected exception (a traceback in the answer's error)


class _UsageError(ConfigError):
    """A malformed call (argparse's complaint): EXIT_ERROR, without ending a serving process."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _UsageError(f"{self.prog}: {message}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--serve"]:
        return serve(sys.stdin, sys.stdout)
    try:
        return call(args)
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_ERROR


def serve(requests: io.TextIOBase, answers: io.TextIOBase) -> int:
    """Answer calls until `requests` ends (the driver exited or closed the pipe): one JSON line
    in, `{"argv": [...]}` (a one-shot call's arguments), one JSON line out, `{"code": ..,
    "out": .., "err": ..}` with the exit code, stdout and stderr the one-shot call would have.
    Calls run one at a time; a failing call (any exception) is an answer, not the end."""
    real_out = answers
    sys.stdout = sys.stderr  # anything else printed must not corrupt the answers
    for line in requests:
        if not line.strip():
            continue
        out, err = io.StringIO(), io.StringIO()
        try:
            argv = json.loads(line)["argv"]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = call([str(a) for a in argv])
        except _UsageError as e:
            code = EXIT_ERROR
            err.write(str(e))
        except Exception:  # noqa: BLE001 - a bug in one call is reported, the process serves on
            code = EXIT_BUG
            err.write(traceback.format_exc())
        real_out.write(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}) + "\n")
        real_out.flush()
    return 0


@functools.cache
def _parser() -> _Parser:
    """Built once per process: building it (argparse's help formatters and gettext lookups, a
    stat of every locale directory per message) cost more than a whole table-schema call."""
    p = _Parser(prog="python -m htap.catalog.bridge")
    p.add_argument("--config", required=True)
    p.add_argument("--source")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list-tables")
    ls.add_argument("namespace", nargs="?", default="")
    sp = sub.add_parser("set-property")
    sp.add_argument("table")
    sp.add_argument("key")
    sp.add_argument("value")
    for command in ("renew-leases", "release-leases"):
        sub.add_parser(command).add_argument("owners", nargs="*", help="lease owners of Spark scans (HtapScan)")
    ts = sub.add_parser("table-schema", help="the Spark DDL of a table, statistics on its first column (loadTable)")
    ts.add_argument("table", help="<schema>.<table>")
    ts.add_argument("--changes", action="store_true", help="the DDL of the table's change feed (htap.pushdown.change_feed)")
    ts.add_argument("--as-of-version", help="a FOR VERSION AS OF read: the views that hold its seq")
    ts.add_argument("--as-of-time", type=float, help="a FOR TIMESTAMP AS OF read (Unix seconds): the views that hold its seq")
    vs = sub.add_parser("view-sql", help="a view's SQL as Spark reads <catalog>.views.<name> (loadView)")
    vs.add_argument("name", help="the view's name")
    vs.add_argument("catalog", help="the catalog's name in Spark")
    vs.add_argument("--as-of-version", help="its tables read FOR VERSION AS OF this seq")
    vs.add_argument("--as-of-time", type=float, help="its tables read FOR TIMESTAMP AS OF this time (Unix seconds)")
    pr = sub.add_parser("plan-read", help="plan a scan's read as Spark's planning worker would (PickledDataSource)")
    pr.add_argument("options", help="the scan's data source options, a JSON object")
    pr.add_argument("schema", help="the read schema, Spark's StructType JSON")
    pr.add_argument("max_arrow_batch_size", type=int)
    pr.add_argument("binary_as_bytes", choices=("true", "false"))
    cp = sub.add_parser("check-plan", help="whether a pushed plan renders and binds (htap.pushdown.plan_check)")
    cp.add_argument("plan", help="the pushed plan, JSON")
    cp.add_argument("--inject", help="a failure a test asks for (htap.pushdown.plan_check)")
    cc = sub.add_parser("check-catalog", help="check a Spark catalog's options (HtapCatalog.initialize)")
    cc.add_argument("catalog", help="the catalog's name in Spark")
    cc.add_argument("options", help="its options, a JSON object")
    rd = sub.add_parser("report-damage")
    rd.add_argument("table_id", type=int)
    rd.add_argument("delta", help="the delta file (relative to the warehouse) a task found damaged")
    return p


def call(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "plan-read":
        return plan_read(args)
    if args.command == "check-catalog":
        return check_catalog(args.catalog, json.loads(args.options))
    try:
        cfg = cached_config(args.config, missing_hint=SPARK_CONFIG_HINT)
        with MetadataStore(cfg.metadata) as store:
            if args.command == "list-tables":
                source = cfg.source(args.source)
                tables = [[t.schema, t.name] for t in store.list_tables(source.name, views=True)]
                tables += [[SYSTEM_SCHEMA, name] for name in SCHEMAS]
                print(json.dumps([t for t in tables if not args.namespace or t[0] == args.namespace]))
            elif args.command == "set-property":
                source = cfg.source(args.source)
                schema, name = args.table.split(".", 1)
                set_property(store, store.get_table(source.name, schema, name), args.key, args.value)
                print(json.dumps({"ok": True}))
            elif args.command == "table-schema":
                schema, name = args.table.split(".", 1)
                source = cfg.source(args.source)
                if args.changes:
                    from htap.pushdown.change_feed import change_ddl
                try:
                    if args.changes:
                        answer = {"ddl": change_ddl(store, source.name, schema, name)}
                    else:
                        travel = None
                        if args.as_of_version is not None or args.as_of_time is not None:
                            travel = TimeTravel(args.as_of_version, args.as_of_time, cfg.window_s)
                        answer = table_answer(store, source.name, schema, name, travel=travel)
                except NoSuchTableError:
                    not_htap = _source_table_not_htap(cfg, source, schema, name)
                    if not_htap is None:
                        raise
                    print(not_htap, file=sys.stderr)
                    return EXIT_ERROR  # not Spark's bare TABLE_OR_VIEW_NOT_FOUND: say how to add it
                print(json.dumps(answer))
            elif args.command == "view-sql":
                from htap.rewrite.views import spark_view_sql

                view = store.get_view(cfg.source(args.source).name, args.name)
                print(json.dumps({"sql": spark_view_sql(view.sql, args.catalog, args.as_of_version, args.as_of_time)}))
            elif args.command == "renew-leases":
                renewed = renew_queries(store, args.owners, cfg.pin_ttl_s)
                print(json.dumps({"renewed": renewed, "ttl_s": cfg.pin_ttl_s}))
            elif args.command == "check-plan":
                source = cfg.source(args.source)
                dialect = open_queryable(source).dialect
                print(json.dumps({"why": plan_check.check(store, source, args.plan, dialect, args.inject)}))
            elif args.command == "release-leases":
                # The query ended: its leases, and the source snapshots its scans exported here.
                released = release_queries(store, args.owners)
                print(json.dumps({"released": released, "snapshots": source_snapshot.release(args.owners)}))
            else:
                print(json.dumps(report_damage(cfg, store, args.source, args.table_id, args.delta)))
        return 0
    except NoSuchTableError as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_SUCH_TABLE
    except HtapError as e:
        print(str(e), file=sys.stderr)
        return EXIT_ERROR


def _source_table_not_htap(cfg: HtapConfig, source, schema: str, name: str) -> str | None:
    """For a name that is no HTAP table: what to tell a Spark user when the source has a table of
    that name (as `htap tables add` checks it), or None when it has none or cannot be asked (then
    Spark's own TABLE_OR_VIEW_NOT_FOUND is the answer)."""
    from htap.errors import TableError

    try:
        open_source(source).describe_table(schema, name)
    except NoSuchTableError:
        return None
    except TableError as e:  # the table exists but cannot be replicated (no key, a type, not a table)
        return f"{schema}.{name} is a table of source {source.name} but not an HTAP table, and cannot be one: {e}"
    except HtapError:  # the source is unreachable from here: nothing more to say than Spark's error
        return None
    return (f"{schema}.{name} is a table of source {source.name} but not an HTAP table: add it with"
            f" `htap --config {cfg.path} tables add {schema}.{name}` (then `htap serve` copies it)")


def check_catalog(catalog: str, options: dict) -> int:
    """A Spark catalog's options, checked when Spark initializes it (HtapCatalog.initialize): one
    line naming the option, its value and what it takes, instead of a failed read later."""
    from htap.pushdown.datasource import parse_read_after, parse_read_tail
    from htap.pushdown.routing import ROUTES
    from htap.seq import parse_seq

    prefix = f"spark.sql.catalog.{catalog}"
    opts = {k.lower(): v for k, v in options.items()}
    try:
        route = opts.get("route", "auto")
        if route.lower() not in ROUTES:
            raise ConfigError(f"{prefix}.route = {route!r} is not a route: use one of {', '.join(ROUTES)}")
        if opts.get("as_of_seq"):
            try:
                parse_seq(opts["as_of_seq"])
            except ConfigError as e:
                raise ConfigError(f"{prefix}.as_of_seq = {opts['as_of_seq']!r}: give a seq (an integer) or a Postgres"
                                  " LSN like 0/16B3748") from e
        try:
            parse_read_after(opts.get("read_after"), opts.get("read_after_timeout_s"))
        except ConfigError as e:
            raise ConfigError(f"{prefix}.read_after / read_after_timeout_s: {e}") from e
        try:
            parse_read_tail(opts.get("read_tail"))
        except ConfigError as e:
            raise ConfigError(f"{prefix}.read_tail: {e}") from e
        if opts.get("password_file"):
            try:
                open(opts["password_file"]).close()
            except OSError as e:
                raise ConfigError(f"{prefix}.password_file = {opts['password_file']!r} cannot be read: {e.strerror}") from e
        try:
            cfg = cached_config(opts["config"], missing_hint=SPARK_CONFIG_HINT.replace("<catalog>", catalog))
        except ConfigError as e:
            raise ConfigError(f"{prefix}.config: {e}") from e
        try:
            cfg.source(opts.get("source"))
        except ConfigError as e:
            raise ConfigError(f"{prefix}.source: {e}") from e
    except ConfigError as e:
        print(" ".join(str(e).split()), file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps({"ok": True}))
    return 0


def plan_read(args: argparse.Namespace) -> int:
    """A scan's read info for Spark (htap.pushdown.read_planning), base64 in JSON. The reader's
    marked errors (denied access, routing, a table gone) go back as their own lines, which the
    shim turns into Spark's exceptions (HtapBatch.translate); the options (a password among them)
    never appear in an answer."""
    import base64

    from htap.pushdown.datasource import ERROR_MARKER, PlanningError
    from htap.pushdown.read_planning import plan_read as plan

    try:
        planned = plan(json.loads(args.options), args.schema, args.max_arrow_batch_size, args.binary_as_bytes == "true")
    except NoSuchTableError as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_SUCH_TABLE
    except PermissionError as e:  # its text keeps the marker: Spark users match on it
        print(" ".join(str(e).split()), file=sys.stderr)
        return EXIT_PERMISSION_DENIED
    except (PlanningError, HtapError) as e:  # the exit code says what it is: the message without a marker
        print(" ".join(str(e).split()).removeprefix(f"{ERROR_MARKER}: "), file=sys.stderr)
        return EXIT_ERROR
    b64 = base64.b64encode
    print(json.dumps({"func": b64(planned.func).decode(), "partitions": [b64(x).decode() for x in planned.partitions]}))
    return 0


def report_damage(cfg: HtapConfig, store: MetadataStore, source: str | None, table_id: int, delta: str) -> dict:
    """Mark a table unhealthy for a delta a task found damaged, after checking it here: the
    report comes from a failed query's error text, which a Spark user can write too (e.g.
    `raise_error`), so only a live delta of a table of this catalog's source that is damaged
    on disk marks anything."""
    try:
        table = store.table_by_id(table_id)
    except NoSuchTableError:
        return {"marked": False, "why": f"no table {table_id}"}
    name = f"{table.source}.{table.qualified_name}"
    if table.source != cfg.source(source).name:
        return {"marked": False, "why": f"{name} is not a table of this catalog's source"}
    live = {d.path: d for d in store.deltas(table.id)}
    if delta not in live:
        return {"marked": False, "why": f"{delta} is not a live delta of {name} (compacted away meanwhile?)"}
    try:
        with open_warehouse(cfg).local({delta: live[delta].checksum}) as root:
            problem = file_damage(root / delta)
    except DamagedReplicaError as e:  # an object that does not match its checksum
        problem = str(e).removeprefix(DAMAGE_PREFIX)
    if problem is None:
        return {"marked": False, "why": f"{delta} of {name} is intact"}
    error: DamagedReplicaError = damaged(name, problem)
    mark_damaged(store, table.id, error)
    return {"marked": True, "table": name, "error": str(error)}


if __name__ == "__main__":
    sys.exit(main())
