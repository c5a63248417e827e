"""Catalog calls the Java shim makes through a subprocess: `python -m htap.catalog.bridge ...`.

Answers on stdout as JSON. Failures are one line on stderr and an exit code the shim maps to
Spark's exceptions: EXIT_NO_SUCH_TABLE (NoSuchTableException), EXIT_ERROR (a user error: bad
property, unknown option; IllegalArgumentException), anything else a bug (a traceback). Kept
tiny: the shim uses it for SHOW TABLES and ALTER TABLE ... SET TBLPROPERTIES, never on the read path.
"""

from __future__ import annotations

import argparse
import json
import sys

from htap.catalog.properties import set_property
from htap.conf import load_config
from htap.errors import HtapError, NoSuchTableError
from htap.pushdown.system_tables import SCHEMAS, SYSTEM_SCHEMA
from htap.replica.metadata import MetadataStore

EXIT_ERROR = 2
EXIT_NO_SUCH_TABLE = 3  # keep in sync with Bridge.java


def main(argv: list[str] | None = None) -> int:
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
                tables = [[t.schema, t.name] for t in store.list_tables(source.name)]
                tables += [[SYSTEM_SCHEMA, name] for name in SCHEMAS]
                print(json.dumps([t for t in tables if not args.namespace or t[0] == args.namespace]))
            else:
                schema, name = args.table.split(".", 1)
                set_property(store, store.get_table(source.name, schema, name), args.key, args.value)
                print(json.dumps({"ok": True}))
        return 0
    except NoSuchTableError as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_SUCH_TABLE
    except HtapError as e:
        print(str(e), file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
