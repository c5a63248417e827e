"""Catalog calls the Java shim makes through a subprocess: `python -m htap.catalog.bridge ...`.

Answers on stdout as JSON; errors are one line on stderr with exit code 2. Kept tiny: the shim
uses it for SHOW TABLES and ALTER TABLE ... SET TBLPROPERTIES, nothing on the read path.
"""

from __future__ import annotations

import argparse
import json
import sys

from htap.errors import ConfigError, HtapError, NoSuchTableError

PROPERTIES = {
    "htap.failover": "true routes every read of the table to the source; false back to the replica",
    "htap.max_staleness": "seconds; a replica further behind than this fails reads over to the source",
}


def set_property(store, table, key: str, value: str) -> None:
    """Apply one table property; an empty value resets it."""
    if key == "htap.failover":
        if value.lower() not in ("true", "false", ""):
            raise ConfigError(f"htap.failover takes 'true' or 'false', not {value!r}")
        store.set_failover(table.id, value.lower() == "true")
    elif key == "htap.max_staleness":
        try:
            store.set_max_staleness(table.id, float(value) if value else None)
        except ValueError as e:
            raise ConfigError(f"htap.max_staleness takes seconds, not {value!r}") from e
    else:
        raise ConfigError(
            f"unknown table property {key!r}: spark-htap tables take "
            + "; ".join(f"{k} ({doc})" for k, doc in PROPERTIES.items())
        )


def main(argv: list[str] | None = None) -> int:
    from htap.conf import load_config
    from htap.pushdown.datasource import NO_SUCH_TABLE_MARKER
    from htap.replica.metadata import MetadataStore

    p = argparse.ArgumentParser(prog="python -m htap.catalog.bridge")
    p.add_argument("--config", required=True)
    p.add_argument("--source")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list-tables")
    ls.add_argument("namespace", nargs="?", default="")
    sp = sub.add_parser("set-property")
    sp.add_argument("table")
    sp.add_argument("key")
    sp.add_argument("value")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        source = cfg.source(args.source)
        with MetadataStore(cfg.metadata) as store:
            if args.command == "list-tables":
                from htap.pushdown.system_tables import SCHEMAS, SYSTEM_SCHEMA

                tables = [[t.schema, t.name] for t in store.list_tables(source.name)]
                tables += [[SYSTEM_SCHEMA, name] for name in SCHEMAS]
                print(json.dumps([t for t in tables if not args.namespace or t[0] == args.namespace]))
            else:
                schema, name = args.table.split(".", 1)
                try:
                    table = store.get_table(source.name, schema, name)
                except NoSuchTableError as e:
                    raise NoSuchTableError(f"{NO_SUCH_TABLE_MARKER}: {e}") from e
                set_property(store, table, args.key, args.value)
                print(json.dumps({"ok": True}))
        return 0
    except HtapError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
