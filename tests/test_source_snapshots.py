"""Exported source snapshots: the exact kind (verifiers: equals one replica seq) and the cheap
kind a failover query uses (no replication slot), both seen identically by every reader."""

from __future__ import annotations

from services import pg_dsn

from htap.conf import PostgresConfig
from htap.connectors.registry import open_queryable


def _source():
    return open_queryable(PostgresConfig(name="snap", dsn=pg_dsn()))


def _slots(pg) -> int:
    with pg.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_replication_slots")
        return cur.fetchone()[0]


def _count(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM snap_t")
        return cur.fetchone()[0]


def test_a_failover_query_snapshot_takes_no_slot_and_every_reader_sees_it(pg):
    with pg.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS snap_t; CREATE TABLE snap_t (id int PRIMARY KEY); INSERT INTO snap_t VALUES (1), (2)")
    slots = _slots(pg)
    with _source().export_snapshot(exact_seq=False) as snapshot:
        assert _slots(pg) == slots  # no replication slot: nothing waits for running writers
        with pg.cursor() as cur:
            cur.execute("INSERT INTO snap_t VALUES (3)")
        readers = [snapshot.open_transaction() for _ in range(2)]
        try:
            assert [_count(r) for r in readers] == [2, 2]  # the commit after the export is invisible to all
        finally:
            for r in readers:
                r.close()
    assert _count(pg) == 3


def test_an_exact_snapshot_names_the_replica_seq(pg):
    with pg.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS snap_t; CREATE TABLE snap_t (id int PRIMARY KEY); INSERT INTO snap_t VALUES (1)")
        cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        before = int(cur.fetchone()[0])
    with _source().export_snapshot() as snapshot:
        assert snapshot.seq >= before - 1
        reader = snapshot.open_transaction()
        try:
            assert _count(reader) == 1
        finally:
            reader.close()
