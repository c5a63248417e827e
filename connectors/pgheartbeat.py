"""Keeping an idle Postgres stream's position current (the max safe seq follows it).

The walsender can only decode WAL the server has flushed, and it reports how far it has read
(its sent position) only in keepalives. On a source where nothing commits, WAL still grows
(autovacuum, standby snapshots, hint bits) without being flushed until the next commit or
checkpoint, so the stream's position — and every table's max safe seq — could stay behind
`pg_current_wal_lsn()` for seconds to minutes, and a table with a `max_staleness` of a few
seconds failed over to the source while nothing happened.

So when the stream has been quiet for `every_s`, the heartbeat asks the source for its current
insert position (a read, no WAL). If the stream has not seen it yet, the heartbeat commits one tiny
transaction holding a logical message (`pg_logical_emit_message`, not published: pgoutput does
not send it), which flushes all WAL before it, and then asks the walsender for keepalives until
one reports a position past the message. A truly idle source gets no heartbeat WAL at all.
"""

from __future__ import annotations

import logging
import time

import psycopg2

from htap.seq import lsn_to_int

log = logging.getLogger(__name__)

PREFIX = "htap_heartbeat"
GIVE_UP_S = 10.0  # stop asking for keepalives about one heartbeat after this (a later one asks again)


class Heartbeat:
    """The side connection and timers of one stream's heartbeat (see the module docstring)."""

    def __init__(self, connect, every_s: float = 0.25, reply_every_s: float = 0.05, clock=time.monotonic):
        self.connect = connect  # () -> an autocommit connection to the source
        self.every_s = every_s
        self.reply_every_s = reply_every_s
        self.clock = clock
        self.conn = None
        self.enabled = True
        self.quiet_since = clock()
        self.next_check = 0.0
        self.next_reply = 0.0
        self.target: int | None = None  # a message position the stream must be told it passed
        self.target_at = 0.0

    def heard(self) -> None:
        """The stream received data: it is not quiet."""
        self.quiet_since = self.clock()

    def due_in(self) -> float:
        """Seconds until `tick` has something to do (an upper bound for the stream's wait)."""
        now = self.clock()
        if self.target is not None:
            return max(0.0, self.next_reply - now)
        if not self.enabled:
            return float("inf")
        return max(0.0, max(self.next_check, self.quiet_since + self.every_s) - now)

    def tick(self, progress: int, request_reply) -> None:
        """Call between transactions while no message is waiting; `progress` is the stream's
        position (everything up to it was sent), `request_reply` asks the walsender for a keepalive."""
        now = self.clock()
        if self.target is not None:
            if progress >= self.target or now - self.target_at > GIVE_UP_S:
                self.target = None
            elif now >= self.next_reply:
                self.next_reply = now + self.reply_every_s
                request_reply()
            return
        if not self.enabled or now < self.next_check or now - self.quiet_since < self.every_s:
            return
        self.next_check = now + self.every_s
        target = self._beat(progress)
        if target is not None:
            self.target, self.target_at = target, now
            self.next_reply = now + self.reply_every_s
            request_reply()

    def _beat(self, progress: int) -> int | None:
        """A heartbeat if the source is past `progress`: returns the message's position."""
        try:
            if self.conn is None:
                self.conn = self.connect()
                with self.conn.cursor() as cur:
                    # Flush locally only: a heartbeat never waits for synchronous standbys.
                    cur.execute("SET synchronous_commit = local")
            with self.conn.cursor() as cur:
                # The insert position: also WAL not yet written (pg_current_wal_lsn() lags it).
                cur.execute("SELECT pg_current_wal_insert_lsn()")
                if lsn_to_int(cur.fetchone()[0]) - 1 <= progress:
                    return None
                # Transactional: its commit flushes the WAL before it (a non-transactional message
                # is not flushed before Postgres 17).
                cur.execute("SELECT pg_logical_emit_message(true, %s, '')", (PREFIX,))
                return lsn_to_int(cur.fetchone()[0])
        except (psycopg2.errors.InsufficientPrivilege, psycopg2.errors.ReadOnlySqlTransaction,
                psycopg2.errors.ObjectNotInPrerequisiteState) as e:
            self.enabled = False
            log.warning("heartbeats off (%s): on an idle source the safe seq may lag its position until the next "
                        "commit", str(e).strip().splitlines()[0])
        except psycopg2.Error as e:  # the source went away: the stream itself will say so
            log.debug("heartbeat failed: %s", e)
            self.close()
        return None

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg2.Error:
                pass
            self.conn = None
