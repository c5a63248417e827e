"""Issue 3: one behaviour suite for the metadata store, run on SQLite and on Postgres."""

from __future__ import annotations

import dataclasses
import time
import uuid

import psycopg2
import pyarrow as pa
import pytest

from htap.conf import is_postgres_location
from htap.errors import NoSuchTableError, ReplicaError, TableError
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import Column
from htap.replica.partitions import encode_bounds

from services import SERVICES


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = MetadataStore(tmp_path / "m.db", create=True)
        yield s
        s.close()
        return
    db = f"htap_meta_{uuid.uuid4().hex[:8]}"
    server = SERVICES.postgres
    admin = psycopg2.connect(server.dsn)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    url = server.url(db)
    s = MetadataStore(url, create=True)
    yield s
    s.close()
    admin.cursor().execute(f"DROP DATABASE {db} WITH (FORCE)")
    admin.close()


def add(store, name="t"):
    return store.add_table("src", "public", name, [Column("id", "integer", False), Column("v", "text", True)], ["id"], "schema")


def delta(table_id, path, lo, hi, part=0, rows=10):
    return NewDelta(table_id, path, lo, hi, rows, 1000, 0, part)


def test_tables(store):
    t = add(store)
    assert store.get_table("src", "public", "t") == t
    assert t.state == "pending" and t.key == ("id",) and t.columns[1] == Column("v", "text", True)
    with pytest.raises(TableError, match="already an HTAP table"):
        add(store)
    with pytest.raises(NoSuchTableError, match=r"HTAP tables: public\.t"):
        store.get_table("src", "public", "nope")
    assert [x.name for x in store.list_tables("src")] == ["t"] and store.list_tables("other") == []


def test_copy_then_checkpoints_make_a_table_readable(store):
    t = add(store)
    store.start_copy(t.id)
    store.finish_copy(t.id, [delta(t.id, "a", 100, 100)], copy_seq=100, partition_bounds=None)
    assert store.table_by_id(t.id).state == "catching_up"
    store.commit_checkpoint("src", [], 90, time.time())
    assert not store.table_by_id(t.id).readable  # the stream has not reached the copy yet
    store.commit_checkpoint("src", [delta(t.id, "b", 101, 120)], 120, time.time(), truncations=[(t.id, 110)])
    t = store.table_by_id(t.id)
    assert t.readable and t.max_safe_seq == 120 and store.source_position("src") == 120
    assert [d.path for d in store.deltas(t.id)] == ["a", "b"]
    assert store.truncated_at(t.id, 109) is None and store.truncated_at(t.id, 115) == 110
    # An interrupted copy is forgotten when it restarts.
    assert sorted(store.start_copy(t.id)) == ["a", "b"] and store.deltas(t.id) == []


def test_safe_points_map_time_and_seq(store):
    t0 = time.time()
    store.commit_checkpoint("src", [], 10, t0)
    store.commit_checkpoint("src", [], 20, t0 + 5)
    assert store.seq_at("src", t0 - 1) is None
    assert store.seq_at("src", t0 + 1) == 10 and store.seq_at("src", t0 + 6) == 20
    assert store.time_of("src", 15) == t0 + 5


def test_replace_is_compare_and_swap_and_pins_hold_retired_files(store):
    t = add(store)
    store.start_copy(t.id)
    store.finish_copy(t.id, [delta(t.id, "a", 1, 1), delta(t.id, "b", 2, 5)], 1, None)
    old = store.deltas(t.id)
    pin, pinned = store.pin(t.id, 5, ttl_s=60)
    assert [d.path for d in pinned] == ["a", "b"] and store.live_pins(t.id)[0].id == pin.id
    assert store.replace_deltas(t.id, old, [delta(t.id, "ab", 1, 5)])
    assert not store.replace_deltas(t.id, old, [delta(t.id, "lost", 1, 5)])  # inputs no longer live
    assert [d.path for d in store.deltas(t.id)] == ["ab"]
    assert store.collect_garbage() == []  # the pin predates the retirement
    store.release_pin(pin.id)
    assert sorted(store.collect_garbage()) == ["a", "b"]
    # An expired pin holds nothing.
    store.pin(t.id, 5, ttl_s=-1)
    store.replace_deltas(t.id, store.deltas(t.id), [delta(t.id, "c", 1, 5)])
    assert store.collect_garbage() == ["ab"]


def test_leases_are_shared_renewed_and_hold_retired_files_until_they_lapse(store):
    """A process's reads share one lease per table for half its length (no write per read);
    renewals keep it alive; garbage collection keeps what a live lease can read, by the clock."""
    now = [1000.0]
    store.clock = lambda: now[0]
    t = add(store)
    store.start_copy(t.id)
    store.finish_copy(t.id, [delta(t.id, "a", 1, 1)], 1, None)
    lease, seen = store.lease(t.id, 1, 30.0)
    assert [d.path for d in seen] == ["a"]
    assert store.replace_deltas(t.id, store.deltas(t.id), [delta(t.id, "a2", 1, 1)])
    now[0] += 14.0
    again, seen = store.lease(t.id, 1, 30.0)
    assert again == lease and [d.path for d in seen] == ["a2"]  # the same lease: no write
    assert [p.id for p in store.live_pins(t.id)] == [lease]
    assert store.collect_garbage() == []  # "a" was retired after the lease was taken
    now[0] += 2.0  # 16 s old: a read now gets a fresh lease (the old one may end in 14 s)
    fresh, _ = store.lease(t.id, 1, 30.0)
    assert fresh != lease
    now[0] += 10.0
    assert store.renew_pin(lease, 30.0)  # a task still reads under it: until 1056
    now[0] = 1050.0
    assert store.collect_garbage() == []
    now[0] = 1057.0  # both leases lapsed (fresh one at 1046)
    assert not store.renew_pin(lease, 30.0)
    assert store.collect_garbage() == ["a"]
    assert store.live_pins(t.id) == []


def test_scans_and_failover_flags(store):
    t = add(store)
    for i in range(105):
        store.record_scan(t.id, "replica", i, {"n": i})
    recent = store.recent_scans(t.id, 3)
    assert [r.pushed["n"] for r in recent] == [104, 103, 102]
    store.set_failover(t.id, True)
    assert store.table_by_id(t.id).failover


def test_a_missing_store_says_run_init(tmp_path):
    with pytest.raises(ReplicaError, match="run `htap init`"):
        MetadataStore(tmp_path / "none.db")


BOUNDS = encode_bounds(pa.array([50], pa.int64()))


def test_a_dumped_source_restores_into_an_empty_store_with_its_ids(store, tmp_path):
    t = add(store)
    add(store, "other")
    store.start_copy(t.id)
    store.finish_copy(t.id, [NewDelta(t.id, "a", 100, 100, 10, 1000, checksum="ca", dv_checksum="sa")], 100, BOUNDS)
    store.commit_checkpoint("src", [NewDelta(t.id, "b", 101, 120, 5, 500, checksum="cb")], 120, 1000.0, [(t.id, 110)])
    dump = store.dump_source("src")
    layouts = store.layouts(t.id)
    postgres = is_postgres_location(store.location)
    fresh = store if postgres else MetadataStore(tmp_path / "fresh.db", create=True)
    if postgres:  # restored into the same database, emptied (its id sequences stay where they were)
        for table in store.list_tables("src"):
            store.remove_table(table.id)
        store.forget_source("src")
    fresh.restore_source(dump)
    got = fresh.get_table("src", "public", "t")
    assert got == dataclasses.replace(t, state="streaming", copy_seq=100, max_safe_seq=120, max_safe_time=1000.0,
                                      partition_bounds_b64=BOUNDS)
    assert [(d.path, d.checksum, d.dv_checksum) for d in fresh.deltas(t.id)] == [("a", "ca", "sa"), ("b", "cb", None)]
    assert fresh.source_position("src") == 120 and fresh.truncated_at(t.id, 115) == 110
    assert fresh.seq_at("src", 1000.0) == 120
    assert fresh.layouts(t.id) == layouts and layouts  # the partition history (reads at older seqs)
    newer = fresh.add_table("src", "public", "later", [Column("id", "integer", False)], ["id"], "schema")
    assert newer.id > max(t.id, fresh.get_table("src", "public", "other").id)  # ids never reused


def test_service_heartbeats_are_recorded_replaced_and_removed(store):
    from htap.replica.metadata import SERVICE_STALE_S, running_services

    now = [1000.0]
    store.clock = lambda: now[0]
    store.beat_service("h:1", {"host": "h", "pid": 1})
    now[0] = 1004.0
    store.beat_service("h:1", {"host": "h", "pid": 1})
    store.beat_service("h:2", {"host": "h", "pid": 2})
    beats = store.service_beats()
    assert sorted((b["id"], b["beat_at"], b["pid"]) for b in beats) == [("h:1", 1004.0, 1), ("h:2", 1004.0, 2)]
    store.end_service("h:2")
    assert [b["id"] for b in store.service_beats()] == ["h:1"]
    assert running_services(store.service_beats(), 1004.0 + SERVICE_STALE_S) != []
    assert running_services(store.service_beats(), 1004.0 + SERVICE_STALE_S + 1) == []


def _view(store, base, name="by_v"):
    from htap.rewrite.views import parse_view

    sql = f"SELECT v, count(*) FROM public.{base.name} GROUP BY v"
    definition = parse_view(sql, {f"public.{base.name}": pa.schema([("id", pa.int32()), ("v", pa.string())])})
    columns = [Column("v", "text", True), Column("_rows", "bigint", False)]
    return store.add_view(base, name, sql, definition, columns, ["v"], "view-schema"), definition


def test_views_are_tables_of_their_own_that_ingest_never_lists(store, tmp_path):
    t = add(store)
    view, definition = _view(store, t)
    assert view.base_id == t.id and view.definition == definition and view.table.kind == "view"
    assert view.table.qualified_name == "views.by_v" and view.table.state == "pending" and view.table.key == ("v",)
    assert store.get_table("src", "views", "by_v") == view.table  # read like any replica table
    assert [x.name for x in store.list_tables("src")] == ["t"]  # ingest copies and streams tables only
    assert [x.name for x in store.list_tables("src", views=True)] == ["t", "by_v"]
    assert store.list_views("src") == store.views_of(t.id) == [view] == [store.get_view("src", "by_v")]
    assert store.views_of(view.table.id) == [] and store.list_views("other") == []
    with pytest.raises(TableError, match="already exists"):
        _view(store, t)
    with pytest.raises(TableError, match="the schema name 'views' is where spark-htap names derived views"):
        store.add_table("src", "Views", "t", [Column("id", "integer", False)], ["id"], "x")
    with pytest.raises(NoSuchTableError, match=r"views\.nope is not a view of source 'src' \(its views: by_v\)"):
        store.get_view("src", "nope")
    with pytest.raises(TableError, match="views by_v aggregate this table: drop them first"):
        store.remove_table(t.id)
    # A checkpoint advances streaming tables only: a view not yet built stays unreadable.
    store.start_copy(t.id)
    store.finish_copy(t.id, [], 100, None)
    store.commit_checkpoint("src", [], 120, 1000.0)
    assert store.get_table("src", "public", "t").readable and not store.get_view("src", "by_v").table.readable
    # Manifests keep views: a store rebuilt from one has them.
    dump = store.dump_source("src")
    if not is_postgres_location(store.location):
        fresh = MetadataStore(tmp_path / "fresh.db", create=True)
        fresh.restore_source(dump)
        assert fresh.list_views("src") == [view]
    store.remove_table(view.table.id)
    assert store.list_views() == [] and store.list_tables("src", views=True) == [store.get_table("src", "public", "t")]
    store.remove_table(t.id)


def test_a_version_9_store_is_upgraded_in_place_with_its_tables_kept(tmp_path):
    path = tmp_path / "old.db"
    s = MetadataStore(path, create=True)
    t = add(s)
    with s.transaction():  # as version 9 left it: no views, no kinds
        s._x("DROP TABLE views")
        s._x("ALTER TABLE tables DROP COLUMN kind")
        s._x("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    s.close()
    s = MetadataStore(path)
    assert s.get_table("src", "public", "t") == t and s.list_views() == []
    view, _ = _view(s, t)
    assert s.list_views() == [view]
    s.close()


def test_an_old_store_opened_read_only_says_who_upgrades_it(tmp_path):
    path = tmp_path / "old.db"
    s = MetadataStore(path, create=True)
    with s.transaction():
        s._x("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    s.close()
    with pytest.raises(ReplicaError, match="schema version 9, this spark-htap needs 10: it is upgraded in place when"):
        MetadataStore(path, read_only=True)
