"""The Postgres source is told exactly the positions the service confirms, never more.

psycopg2's replication cursor moved its reported flush position to a keepalive's WAL end on
its own once the last data message was confirmed, so the slot could move past the position the
metadata store held (the kill -9 test of streamed transactions caught it in CI). The stream now
sends only what `confirm` is given: here an idle stream receives keepalives past its confirmed
commit, replies to them, and the slot stays exactly where it was told."""

from __future__ import annotations

import uuid

import pytest

from htap.seq import lsn_to_int
from services import pg_dsn
from workspace import wait_slot_released, wait_until


@pytest.fixture
def published(pg):
    """A table in a publication, a table outside it, and a slot: (names, stream config)."""
    from htap.conf import PostgresConfig

    name = f"confirm_{uuid.uuid4().hex[:10]}"
    with pg.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{name} (id int PRIMARY KEY)")
        cur.execute(f"CREATE TABLE public.{name}_other (id int PRIMARY KEY)")
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE public.{name}")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    yield name, PostgresConfig(name=name, dsn=pg_dsn(), slot=name, publication=name)
    with pg.cursor() as cur:
        wait_slot_released(cur, name)
        cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        cur.execute(f"DROP PUBLICATION {name}")
        cur.execute(f"DROP TABLE public.{name}, public.{name}_other")


def slot_state(pg, slot: str) -> tuple[int, object]:
    """The slot's confirmed position and the time of the walsender's last status from us."""
    with pg.cursor() as cur:
        cur.execute(
            "SELECT s.confirmed_flush_lsn::text, r.reply_time FROM pg_replication_slots s"
            " LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = %s", (slot,))
        confirmed, reply_time = cur.fetchone()
    return lsn_to_int(confirmed), reply_time


def server_now(pg):
    with pg.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def test_keepalives_past_the_confirmed_position_do_not_move_the_slot(pg, published):
    from htap.connectors.changes import Commit, Progress
    from htap.connectors.postgres import PostgresStream

    name, config = published
    stream = PostgresStream(config, 0)

    def confirmed() -> int:
        stream.poll(0.05)  # the stream reads (and answers keepalives) while we wait
        return slot_state(pg, name)[0]

    def keepalives_past_unpublished_wal() -> int:
        """Write WAL the publication does not send, read keepalives past it, answer one; the
        position they reported."""
        with pg.cursor() as cur:
            cur.execute(f"INSERT INTO public.{name}_other SELECT coalesce(max(id), 0) + 1 FROM public.{name}_other")
            cur.execute("SELECT pg_current_wal_lsn()")
            written = lsn_to_int(cur.fetchone()[0])

        def progressed():
            stream.request_progress()
            event = stream.poll(0.2)
            return event if isinstance(event, Progress) and event.seq >= written - 1 else None

        progress = wait_until(progressed, None, "a keepalive past the unpublished WAL")
        since = server_now(pg)
        stream.request_progress()  # a status update after that keepalive, with our flush position
        wait_until(lambda: stream.poll(0.05) is None and (slot_state(pg, name)[1] or since) > since, None,
                   "the walsender to receive the status update")
        return progress.seq

    try:
        with pg.cursor() as cur:
            cur.execute(f"INSERT INTO public.{name} VALUES (1)")
        commit = wait_until(lambda: next((e for e in iter(lambda: stream.poll(0.2), None) if isinstance(e, Commit)), None),
                            None, "the commit to arrive")
        stream.confirm(commit.seq)
        wait_until(lambda: confirmed() >= commit.seq + 1, None, "the slot to take the confirmed commit")
        assert confirmed() == commit.seq + 1

        position = commit.seq
        for _ in range(2):  # after a confirmed commit, then after a confirmed keepalive position
            seen = keepalives_past_unpublished_wal()
            assert seen > position
            assert confirmed() == position + 1, "the slot moved past the confirmed position"
            stream.confirm(seen)  # as the service does once its store holds it
            wait_until(lambda: confirmed() >= seen + 1, None, "the slot to take the confirmed position")
            position = seen
            assert confirmed() == position + 1
    finally:
        stream.close()
