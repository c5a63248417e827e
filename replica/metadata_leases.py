"""Leases (pins) and query snapshots in the metadata store: what keeps a read's deltas from
garbage collection while it runs, and the one snapshot every scan of a query reads at — a
replica seq, or a source snapshot exported for the query (with the positions of separate
source reads that must agree)."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

from htap.replica.metadata_db import _SOURCE_READS, _SOURCE_SNAPSHOTS, MetadataDatabase
from htap.replica.models import (
    Delta,
)

# The lease each process holds per (store, table): (pin id, created at, seq). See MetadataStore.lease.
_LEASES: dict[tuple[str, int], tuple[int, float, int]] = {}
_LEASES_LOCK = threading.Lock()
QUERY_READS_SOURCE = -1  # query_snapshots.seq of a query that reads a source itself (at an exported snapshot)


@dataclass(frozen=True)
class Pin:
    id: int
    table_id: int
    seq: int
    holder: str
    created_at: float
    expires_at: float


def holder_id() -> str:
    """Who holds a pin: host and process (a pin of a dead holder simply expires)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LeaseRecords(MetadataDatabase):
    """Leases, garbage collection and query snapshots."""

    # --- pins (leases) and garbage collection ----------------------------------------------------

    def pin(self, table_id: int, seq: int, ttl_s: float, holder: str | None = None) -> tuple[Pin, list[Delta]]:
        """Lease `seq` of a table for `ttl_s` and return the deltas a read at `seq` may need at
        that moment (`deltas_at`), in one transaction. While the lease lives (`renew_pin` extends
        it), no delta in that list is deleted, even if compaction or a repartition retires it.

        Not fsynced: a crash that forgets a lease is a crash of the machine its readers ran on
        (SQLite), or of a Postgres store that then loses at most its last fraction of a second.
        """
        now = self.clock()
        with self._tx(durable=False):
            deltas = self.deltas_at(table_id, seq)
            row = self._one(
                "INSERT INTO pins (table_id, seq, holder, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
                (table_id, seq, holder or holder_id(), now, now + ttl_s),
            )
        return Pin(row[0], table_id, seq, holder or holder_id(), now, now + ttl_s), deltas

    def lease(self, table_id: int, seq: int, lease_s: float, holder: str | None = None) -> tuple[int, list[Delta]]:
        """A lease covering a read of the table now, and the deltas a read at `seq` may need.

        With a `holder` (a Spark query's scan, see htap.replica.leases.query_holder): a lease of
        its own, which the driver renews while the query runs and releases when it ends
        (`renew_held`, `release_held`). Without one: the lease this process took for the table
        less than `lease_s / 2` ago if there is one (no write at all: it protects every delta
        retired since it was taken, and lives at least `lease_s / 2` more), else a new one; so a
        process writes at most one (unsynced) lease per table per `lease_s / 2`, however many
        reads it plans, and the lease ends by expiry `lease_s` after its last renewal. A read at
        a seq below the held lease's takes a new one: the deltas of partitions a repartition
        retired are kept for the seqs below it that live leases hold."""
        if holder is not None:
            pin, deltas = self.pin(table_id, seq, lease_s, holder)
            return pin.id, deltas
        key = (self.location, table_id)
        now = self.clock()
        with _LEASES_LOCK:
            held = _LEASES.get(key)
            if held is not None and 0 <= now - held[1] < lease_s / 2 and seq >= held[2]:
                return held[0], self.deltas_at(table_id, seq)
            pin, deltas = self.pin(table_id, seq, lease_s)
            _LEASES[key] = (pin.id, pin.created_at, seq)
            return pin.id, deltas

    def renew_pin(self, pin_id: int, ttl_s: float) -> bool:
        """Extend a live lease to at least `ttl_s` from now; False when it is gone (expired and
        collected, or released): the deltas it protected may be deleted already."""
        now = self.clock()
        with self._tx(durable=False):
            cur = self._x(
                "UPDATE pins SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END"
                " WHERE id = ? AND expires_at > ?",
                (now + ttl_s, now + ttl_s, pin_id, now),
            )
            return cur.rowcount > 0

    def release_pin(self, pin_id: int) -> None:
        with self._tx(durable=False):
            self._x("DELETE FROM pins WHERE id = ?", (pin_id,))

    def move_pin(self, table_id: int, seq: int, ttl_s: float, holder: str) -> Pin:
        """A holder's one lease on a table, moved to `seq` for `ttl_s` from now (a named change
        feed's: htap.replica.changes): the new lease first, then the holder's others, in one
        transaction, so what they protected stays protected until the new one is in place."""
        now = self.clock()
        with self._tx(durable=False):
            (pin_id,) = self._one(
                "INSERT INTO pins (table_id, seq, holder, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
                (table_id, seq, holder, now, now + ttl_s),
            )
            self._x("DELETE FROM pins WHERE table_id = ? AND holder = ? AND id <> ?", (table_id, holder, pin_id))
        return Pin(pin_id, table_id, seq, holder, now, now + ttl_s)

    def renew_held(self, holders: list[str], ttl_s: float) -> int:
        """Extend every live lease of these holders to at least `ttl_s` from now; how many."""
        if not holders:
            return 0
        now = self.clock()
        marks = ", ".join("?" * len(holders))
        with self._tx(durable=False):
            cur = self._x(
                "UPDATE pins SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END"
                f" WHERE holder IN ({marks}) AND expires_at > ?",
                (now + ttl_s, now + ttl_s, *holders, now),
            )
            return cur.rowcount

    def release_held(self, holders: list[str]) -> int:
        """End every lease of these holders (their query ended); how many there were."""
        if not holders:
            return 0
        marks = ", ".join("?" * len(holders))
        with self._tx(durable=False):
            return self._x(f"DELETE FROM pins WHERE holder IN ({marks})", tuple(holders)).rowcount

    def pin_alive(self, pin_id: int) -> bool:
        """Whether a lease still lives (a read: executors may ask)."""
        return self._one("SELECT 1 FROM pins WHERE id = ? AND expires_at > ?", (pin_id, self.clock())) is not None

    def live_pins(self, table_id: int | None = None) -> list[Pin]:
        now = self.clock()
        if table_id is None:
            rows = self._all("SELECT id, table_id, seq, holder, created_at, expires_at FROM pins WHERE expires_at > ?", (now,))
        else:
            rows = self._all(
                "SELECT id, table_id, seq, holder, created_at, expires_at FROM pins WHERE table_id = ? AND expires_at > ?",
                (table_id, now),
            )
        return [Pin(*r) for r in rows]

    def collect_garbage(self, window_low: dict[int, int] | None = None) -> list[str]:
        """Forget retired deltas no live pin can still read; return their paths to delete.

        A retired delta is still needed by any live pin taken before it was retired. One a
        repartition retired at seq S (`until_seq`) also serves reads below S: it stays while a
        live pin reads below S or the table's queryable window (`window_low`: table id -> its
        low end; tables missing there keep them) still reaches below S. Expired pins (their
        holder died or finished without releasing) are dropped first.
        """
        now = self.clock()
        window_low = window_low or {}
        with self._tx():
            self._x("DELETE FROM pins WHERE expires_at <= ?", (now,))
            rows = self._all(
                "SELECT d.id, d.path, d.table_id, d.until_seq FROM deltas d WHERE d.retired_at IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM pins p WHERE p.table_id = d.table_id AND (p.created_at <= d.retired_at"
                " OR (d.until_seq IS NOT NULL AND p.seq < d.until_seq)))"
            )
            rows = [(i, path) for i, path, table_id, until in rows
                    if until is None or (table_id in window_low and window_low[table_id] >= until)]
            for delta_id, _ in rows:
                self._x("DELETE FROM deltas WHERE id = ?", (delta_id,))
        return [path for _, path in rows]

    # --- query snapshots ------------------------------------------------------------------------

    def query_snapshot(self, token: str, source: str, candidate: int) -> int:
        """The snapshot seq of one query on one source: the first scan to ask fixes it
        (`candidate`), every later scan of the same query gets the same seq."""
        now = self.clock()
        with self._tx(durable=False):  # lives as long as its query: a crash ends both
            self._x(
                "INSERT INTO query_snapshots (token, source, seq, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, candidate, now),
            )
            self._x("DELETE FROM query_snapshots WHERE created_at < ?", (now - 86_400,))
            return self._one("SELECT seq FROM query_snapshots WHERE token = ? AND source = ?", (token, source))[0]

    def fix_query_tail(self, token: str, source: str, owner: str, candidate: int, pin: str) -> int:
        """`query_snapshot` for a snapshot in a source's in-memory tail: with the seq, the pin
        (htap.replica.tail.TailPin as JSON) the query's scans read it through, held by `owner`
        (the scan's lease owner: released with its leases). Returns the query's snapshot, which
        another scan may have fixed first (then without this pin: the caller releases it)."""
        now = self.clock()
        with self._tx(durable=False):  # lives as long as its query
            inserted = self._x(
                "INSERT INTO query_snapshots (token, source, seq, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, candidate, now),
            ).rowcount
            if inserted:
                self._x("INSERT INTO query_tails (token, source, owner, pin, created_at) VALUES (?, ?, ?, ?, ?)",
                        (token, source, owner, pin, now))
            self._x("DELETE FROM query_tails WHERE created_at < ?", (now - 86_400,))
            return self._one("SELECT seq FROM query_snapshots WHERE token = ? AND source = ?", (token, source))[0]

    def query_tail(self, token: str, source: str) -> str | None:
        """The tail pin a query's snapshot on `source` is read through (JSON), or None."""
        row = self._one("SELECT pin FROM query_tails WHERE token = ? AND source = ?", (token, source))
        return None if row is None else row[0]

    def query_tails_of(self, owners: list[str], take: bool = False) -> list[str]:
        """The tail pins these lease owners hold (JSON); `take`: forgotten here too (released)."""
        if not owners:
            return []
        marks = ", ".join("?" * len(owners))
        with self._tx(durable=False):
            pins = [r[0] for r in self._all(f"SELECT pin FROM query_tails WHERE owner IN ({marks})", tuple(owners))]
            if take:
                self._x(f"DELETE FROM query_tails WHERE owner IN ({marks})", tuple(owners))
        return pins

    def fixed_query_snapshot(self, token: str, source: str) -> int | None:
        """The snapshot seq a query's first scan fixed on a source (QUERY_READS_SOURCE: the query
        reads that source itself, see `query_source_snapshot`), or None if none is fixed yet."""
        row = self._one("SELECT seq FROM query_snapshots WHERE token = ? AND source = ?", (token, source))
        return None if row is None else row[0]

    def fix_query_source_snapshot(self, token: str, source: str, snapshot: str) -> str:
        """Fix that a query reads `source` itself at the exported `snapshot`, unless a scan of the
        same query fixed something first; returns the source snapshot the query uses (None if
        the first scan fixed a replica seq)."""
        now = self.clock()
        with self._tx():
            self._x(f"CREATE TABLE IF NOT EXISTS {_SOURCE_SNAPSHOTS}")
            # Here, by the driver: the executors' scans record into it (agree_source_read), with a
            # role that may write that table only.
            self._x(f"CREATE TABLE IF NOT EXISTS {_SOURCE_READS}")
            self._x(
                "INSERT INTO query_snapshots (token, source, seq, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, QUERY_READS_SOURCE, now),
            )
            self._x(
                "INSERT INTO query_source_snapshots (token, source, snapshot, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (token, source) DO NOTHING",
                (token, source, snapshot, now),
            )
            self._x("DELETE FROM query_source_snapshots WHERE created_at < ?", (now - 86_400,))
            return self.query_source_snapshot(token, source)

    def query_source_snapshot(self, token: str, source: str) -> str | None:
        if self.fixed_query_snapshot(token, source) != QUERY_READS_SOURCE:
            return None
        row = self._one("SELECT snapshot FROM query_source_snapshots WHERE token = ? AND source = ?", (token, source))
        return row[0]

    def agree_source_read(
        self, token: str, source: str, scan: str, what: str, seq: int, position: str, attempt: str = ""
    ) -> list[tuple[str, str]]:
        """Record that scan `scan` (reading `what`) of query `token` reads `source` at its own
        snapshot `seq` (shown as `position`), and return the other scans of that query that read
        the source at a different seq, as (what, position): empty when they all agree.

        MySQL/MariaDB cannot hand a snapshot to another connection, so each separate scan of a
        failover query opens its own; only their agreement makes the query one state. The record
        and the read of the others are one transaction, and writers of a store are serialized
        (SQLite's single writer, the Postgres store's advisory lock), so of two disagreeing
        scans the one that records second sees the first: at least one fails. Attempts of one
        scan (a task retry, a speculative copy) are compared only with other scans, each attempt
        with every attempt of the others: whichever attempt's rows Spark keeps, a disagreement
        with it was seen (a stale failed attempt may fail a query, never let a mix through). Records go with age, like the query snapshots. The table exists:
        the driver made it when the query fixed its source snapshot (fix_query_source_snapshot)."""
        now = self.clock()
        with self._tx(durable=False):  # lives as long as its query: a crash ends both
            self._x(
                "INSERT INTO query_source_reads (token, source, scan, attempt, what, seq, position, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token, source, scan, attempt) DO UPDATE SET"
                " what = excluded.what, seq = excluded.seq, position = excluded.position, created_at = excluded.created_at",
                (token, source, scan, attempt, what, seq, position, now),
            )
            self._x("DELETE FROM query_source_reads WHERE created_at < ?", (now - 86_400,))
            rows = self._all(
                "SELECT DISTINCT what, position FROM query_source_reads WHERE token = ? AND source = ? AND scan <> ?"
                " AND seq <> ? ORDER BY what, position",
                (token, source, scan, seq),
            )
        return [(r[0], r[1]) for r in rows]
