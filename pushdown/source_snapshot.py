"""One exported source snapshot for every scan of a query that reads a source itself.

When a query must read some table of a source from the source (failover, an unhealthy or stale
replica), every table of that source in the query reads from the source, and they must all see
one source snapshot: Postgres' `pg_export_snapshot()`, imported by each reading transaction
(`SET TRANSACTION SNAPSHOT`). The exporting transaction must stay open until the last read has
imported it; the scan that plans first runs in a short-lived Spark Python worker, so the
snapshot is held by a small detached process (`python -m htap.pushdown.source_snapshot`) for
`HOLD_S` seconds. A read that starts later fails with the source's "invalid snapshot
identifier" error: the query errors, it never mixes snapshots.

The one place that exports such snapshots (issue 14's `QueryableSource.export_snapshot` is
where the per-kind part belongs once both meet).
"""

from __future__ import annotations

import subprocess
import sys
import time

from htap.conf import SourceConfig
from htap.errors import SourceError

HOLD_S = 300.0  # how long a query's exported source snapshot stays importable
READY = "snapshot "


def export_held_snapshot(source: SourceConfig, hold_s: float = HOLD_S) -> str:
    """Export a snapshot of `source` and keep it importable for `hold_s` seconds; its name."""
    if source.kind != "postgres":
        raise SourceError(
            f"source {source.name} ({source.kind}) cannot export a snapshot yet, so a query cannot read several of its"
            f" tables from the source consistently: turn failover off, or wait until the replica is readable"
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "htap.pushdown.source_snapshot", repr(float(hold_s))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # outlives the Spark worker that planned the scan
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(source.dsn + "\n")  # never on the command line (passwords)
    proc.stdin.close()
    line = proc.stdout.readline().strip()
    if not line.startswith(READY):
        error = proc.stderr.read().strip().splitlines()
        proc.wait()
        raise SourceError(f"cannot export a snapshot of source {source.name}: {error[-1] if error else 'no answer'}")
    proc.stdout.close()
    proc.stderr.close()
    return line[len(READY):]


def _hold(hold_s: float) -> None:
    import psycopg2

    dsn = sys.stdin.readline().strip()
    try:
        conn = psycopg2.connect(dsn, application_name="spark-htap query snapshot")
    except psycopg2.Error as e:
        print(str(e).strip().splitlines()[0], file=sys.stderr)
        sys.exit(1)
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    cur = conn.cursor()
    cur.execute("SELECT pg_export_snapshot()")
    print(READY + cur.fetchone()[0], flush=True)
    sys.stdout.close()
    time.sleep(hold_s)  # the transaction stays open: importers need the exporter alive
    conn.rollback()
    conn.close()


if __name__ == "__main__":
    _hold(float(sys.argv[1]))
