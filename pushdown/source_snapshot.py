"""One exported source snapshot for every scan of a query that reads a source itself.

When a query must read some table of a source from the source (failover, an unhealthy or stale
replica), every table of that source in the query reads from the source, and they must all see
one source snapshot, exported once (Postgres: imported by each reading transaction with
`SET TRANSACTION SNAPSHOT`). The exporter must stay open until the last read has imported it, and
the process that plans the scan need not outlive it (Spark's planning worker), so the snapshot is
held by a small detached process (`python -m htap.pushdown.source_snapshot`).

It is held while the query runs: the driver's bridge process (htap.catalog.bridge), which plans
the scans, ends the holders of a query's scans when the driver's query listener releases their
leases at the query's end (`release`), and a holder ends by itself after `HOLD_S` seconds
(a driver that died, a scan planned in Spark's own worker, a plan never run). An exporter is an
open transaction on the source: it keeps a backend connection busy and holds back vacuum, so a
failover query must not leave one behind for minutes. A read that starts after its snapshot was
released (the same DataFrame's plan run again after its query ended) fails with an error that
says so (htap.connectors.queryable.SNAPSHOT_GONE): the query errors, it never mixes snapshots.

The snapshot itself is the source's business (`QueryableSource.export_snapshot`, through the
registry: a failover query asks for `exact_seq=False`, which Postgres serves with
`pg_export_snapshot()` — no replication slot); this module only keeps it alive for the query.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from htap.errors import SourceError

HOLD_S = 300.0  # how long a query's exported source snapshot stays importable at most
READY = "snapshot "

# Lease owner (a Spark scan) -> the holders this process started for it, until `release`.
_held: dict[str, list[subprocess.Popen]] = {}
_lock = threading.Lock()


def export_held_snapshot(config: str, source: str, hold_s: float = HOLD_S, owner: str | None = None) -> str:
    """Export a snapshot of `source` (of the config file `config`) and keep it importable for
    `hold_s` seconds, or until `release` names `owner` (the lease owner of the scan that
    exported it); its name."""
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
    if owner:
        with _lock:
            _held.setdefault(owner, []).append(proc)
    return line[len(READY):]


def release(owners: list[str]) -> int:
    """End the holders this process started for `owners` (their query ended): the source's
    exporting transactions end with them. How many were still holding."""
    with _lock:
        procs = [p for owner in owners for p in _held.pop(owner, [])]
        for owner in list(_held):  # holders that ended by themselves (HOLD_S): reaped, forgotten
            alive = [p for p in _held[owner] if p.poll() is None]
            if alive:
                _held[owner] = alive
            else:
                del _held[owner]
    ended = 0
    for p in procs:
        if p.poll() is None:
            p.terminate()  # the connection closes with the process: Postgres ends the transaction
            ended += 1
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return ended


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
