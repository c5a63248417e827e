"""One exported source snapshot for every scan of a query that reads a source itself.

When a query must read some table of a source from the source (failover, an unhealthy or stale
replica), every table of that source in the query reads from the source, and they must all see
one source snapshot, exported once (Postgres: imported by each reading transaction with
`SET TRANSACTION SNAPSHOT`). The exporter must stay open until the last read has imported it; the scan that plans first runs in a short-lived Spark Python worker, so the
snapshot is held by a small detached process (`python -m htap.pushdown.source_snapshot`) for
`HOLD_S` seconds. A read that starts later fails with the source's "invalid snapshot
identifier" error: the query errors, it never mixes snapshots.

The snapshot itself is the source's business (`QueryableSource.export_snapshot`, through the
registry: a failover query asks for `exact_seq=False`, which Postgres serves with
`pg_export_snapshot()` — no replication slot); this module only keeps it
alive for the query.
"""

from __future__ import annotations

import subprocess
import sys
import time

from htap.errors import SourceError

HOLD_S = 300.0  # how long a query's exported source snapshot stays importable
READY = "snapshot "


def export_held_snapshot(config: str, source: str, hold_s: float = HOLD_S) -> str:
    """Export a snapshot of `source` (of the config file `config`) and keep it importable for
    `hold_s` seconds; its name."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "htap.pushdown.source_snapshot", config, source, repr(float(hold_s))],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # outlives the Spark worker that planned the scan
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline().strip()
    if not line.startswith(READY):
        error = proc.stderr.read().strip().splitlines()
        proc.wait()
        raise SourceError(f"cannot export a snapshot of source {source} for the query: {error[-1] if error else 'no answer'}")
    proc.stdout.close()
    proc.stderr.close()
    return line[len(READY):]


def _hold(config: str, source: str, hold_s: float) -> None:
    from htap.conf import load_config
    from htap.connectors.registry import open_queryable

    try:
        snapshot = open_queryable(load_config(config).source(source)).export_snapshot(exact_seq=False)
    except Exception as e:  # noqa: BLE001 - reported to the planning scan as one line
        print(" ".join(str(e).split()), file=sys.stderr)
        sys.exit(1)
    with snapshot:
        print(READY + snapshot.name, flush=True)
        sys.stdout.close()
        time.sleep(hold_s)  # the exporter stays open: importers need it alive


if __name__ == "__main__":
    _hold(sys.argv[1], sys.argv[2], float(sys.argv[3]))
