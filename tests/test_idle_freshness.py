"""An idle Postgres source: the max safe seq keeps up with the source's position.

WAL an idle server writes but does not flush (here: a non-transactional logical message, which
Postgres before 17 never flushes by itself; in real life autovacuum, standby snapshots, hint
bits) is invisible to the walsender until something flushes it. Without the service's heartbeat
the safe seq stays behind such a position until the next commit or checkpoint (the test servers
checkpoint hourly), so a table with a `max_staleness` of seconds would fail over while nothing
happens. The test waits on the condition; it never asserts how long it took.
"""

from __future__ import annotations

import psycopg2

from htap.seq import lsn_to_int


def test_safe_seq_passes_the_position_of_an_idle_source(workspace):
    ws = workspace
    t = f"{ws.schema}.quiet"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    ws.sql(f"INSERT INTO {t} VALUES (1)")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("quiet")
    ws.wait_caught_up("quiet")
    for i in range(3):
        ws.sql("SELECT pg_logical_emit_message(false, 'htap_test', %s)", (f"unflushed {i}",))
        (insert_lsn,) = ws.sql("SELECT pg_current_wal_insert_lsn()")[0]
        ws.wait_seq("quiet", lsn_to_int(insert_lsn) - 1)
    # The heartbeat is not published: the table saw no change, and still reads its one row.
    assert ws.sql(f"SELECT count(*) FROM {t}") == [(1,)]


class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_flushes_unflushed_wal_and_asks_until_the_stream_passed_it(pg):
    """The heartbeat's steps on a real server, driven by a manual clock: nothing while the
    stream is busy or has seen everything (no WAL written), a flushing heartbeat when the source
    is ahead, then keepalive requests until the stream's position passes the heartbeat."""
    from htap.connectors.pgheartbeat import Heartbeat
    from services import pg_dsn

    def lsn(function: str) -> int:
        with pg.cursor() as cur:
            cur.execute(f"SELECT {function}()")
            return lsn_to_int(cur.fetchone()[0])

    clock = ManualClock()
    replies: list[float] = []
    beat = Heartbeat(lambda: _autocommit(pg_dsn()), every_s=0.25,
                     reply_every_s=0.05, clock=clock)
    try:
        seen = lsn("pg_current_wal_insert_lsn") - 1
        beat.tick(seen, lambda: replies.append(clock.now))
        assert replies == [] and beat.target is None  # not quiet long enough yet
        clock.now = 1.0
        beat.tick(seen, lambda: replies.append(clock.now))
        assert replies == [] and beat.target is None, "a heartbeat although the stream had seen everything"
        assert lsn("pg_current_wal_insert_lsn") - 1 == seen, "checking the source's position wrote WAL"

        with pg.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(false, 'htap_test', 'unflushed')")
            (message,) = cur.fetchone()
        message = lsn_to_int(message)
        clock.now = 1.1  # the last check was at 1.0
        beat.tick(seen, lambda: replies.append(clock.now))
        assert replies == [] and beat.target is None
        clock.now = 1.3
        beat.tick(seen, lambda: replies.append(clock.now))
        assert beat.target is not None and beat.target > message and replies == [1.3]
        assert lsn("pg_current_wal_flush_lsn") > message, "the heartbeat did not flush the WAL before it"

        clock.now = 1.32
        beat.tick(seen, lambda: replies.append(clock.now))
        assert replies == [1.3]  # asked 20 ms ago
        clock.now = 1.36
        beat.tick(beat.target - 1, lambda: replies.append(clock.now))
        assert replies == [1.3, 1.36]
        clock.now = 1.5
        beat.tick(beat.target, lambda: replies.append(clock.now))
        assert beat.target is None and replies == [1.3, 1.36]
    finally:
        beat.close()


def _autocommit(dsn: str):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn
