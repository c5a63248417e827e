"""Initial copy speed: seconds from `htap serve`'s start until the given tables are readable.

    python -m bench.copy --dsn "host=127.0.0.1 port=54330 user=postgres dbname=postgres" tpch.lineitem

Uses the spark-htap of the Python that runs it (so two installs can be compared on the same data,
e.g. the TPC-H tables `python -m bench.tpch --sf 1 --private-postgres` loads and leaves in
`bench/.work/pg`). A fresh workspace under --work; its slot and publication are dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

SOURCE = "bench_copy"


def drop(dsn: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (f"htap_{SOURCE}",))
        cur.execute(f"DROP PUBLICATION IF EXISTS htap_{SOURCE}")
    conn.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tables", nargs="+", help="<schema>.<table> to copy")
    p.add_argument("--dsn", required=True, help="libpq DSN of the Postgres holding the tables")
    p.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "copy", help="workspace folder")
    args = p.parse_args()

    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    config = args.work / "htap.toml"
    htap = [sys.executable, "-m", "htap.app.cli", "--config", str(config)]
    drop(args.dsn)
    subprocess.run([*htap, "init", "--dsn", args.dsn, "--source", SOURCE], check=True, capture_output=True)
    for t in args.tables:
        subprocess.run([*htap, "tables", "add", t], check=True, capture_output=True)
    started = time.monotonic()
    with open(args.work / "serve.log", "wb") as log:
        proc = subprocess.Popen([*htap, "serve"], stdout=log, stderr=subprocess.STDOUT)
    store = MetadataStore(load_config(config).metadata)
    try:
        while not all(t.readable for t in store.list_tables(SOURCE)):
            failed = [f"{t.qualified_name}: {t.error}" for t in store.list_tables(SOURCE) if t.state == "failed"]
            if failed:
                raise SystemExit(f"copy failed: {'; '.join(failed)}")
            if proc.poll() is not None:
                raise SystemExit(f"htap serve stopped; see {args.work / 'serve.log'}")
            time.sleep(0.2)
        seconds = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait()
        store.close()
        drop(args.dsn)
    print(json.dumps({"tables": args.tables, "copy_s": round(seconds, 1)}))


if __name__ == "__main__":
    main()
