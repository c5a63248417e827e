"""pushdown/planning.py over a real SQLite metadata store: one transaction per scan, one snapshot
per query and source — all replica at one seq, or all source at one exported snapshot."""

from __future__ import annotations

import time

import pytest
from unit_support import cmp

from htap.pushdown.planning import ScanRequest, plan_scan, plan_scans
from htap.pushdown.routing import RoutingError
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import Column
from htap.rewrite.pushed import Scan, table_plan, to_dict

WINDOW_S, PIN_TTL_S = 3600.0, 60.0


@pytest.fixture
def store(tmp_path):
    s = MetadataStore(tmp_path / "m.db", create=True)
    for name in ("a", "b"):
        t = s.add_table("src", "public", name, [Column("id", "integer", False)], ["id"], "schema")
        s.start_copy(t.id)
        s.finish_copy(t.id, [NewDelta(t.id, f"{name}0", 100, 100, 1, 10, 0, 0)], copy_seq=100, partition_bounds=None)
    s.commit_checkpoint("src", [], 110, time.time())
    yield s
    s.close()


class Exports:
    def __init__(self):
        self.names: list[str] = []

    def __call__(self) -> str:
        self.names.append(f"snap-{len(self.names)}")
        return self.names[-1]


def scan(store, table, token="q1", mode="auto", exports=None, **kw):
    req = ScanRequest(source="src", schema="public", table=table, mode=mode, snapshot_token=token,
                      snapshot_tables=("cat.public.a", "cat.public.b"), **kw)
    plan = table_plan(f"public.{table}", ["id"])
    return plan_scan(store, req, plan.scans[0], to_dict(plan), window_s=WINDOW_S, pin_ttl_s=PIN_TTL_S,
                     export=exports or Exports())


def scans(*tables: str) -> list[Scan]:
    return [Scan(f"public.{t}", ("id",)) for t in tables]


RECORD = {"ir": 2, "scans": [], "root": {"node": "scan", "scan": 0, "output": []}}  # what the routing record keeps


def test_scans_of_one_query_read_the_replica_at_the_seq_the_first_fixed(store):
    first = scan(store, "a")
    store.commit_checkpoint("src", [], 150, time.time())  # a checkpoint lands between the two scans
    second = scan(store, "b")
    assert first.route.target == second.route.target == "replica"
    assert first.route.seq == second.route.seq == 110
    assert scan(store, "a", token="q2").route.seq == 150  # the next query reads newer data
    assert [r.seq for r in store.recent_scans(store.get_table("src", "public", "b").id, 1)] == [110]
    assert store.live_pins()  # pinned in the same transaction


def test_a_failed_over_table_sends_every_table_of_its_source_to_one_exported_snapshot(store):
    store.set_failover(store.get_table("src", "public", "b").id, True)
    exports = Exports()
    a, b, again = scan(store, "a", exports=exports), scan(store, "b", exports=exports), scan(store, "a", exports=exports)
    assert [p.route.target for p in (a, b, again)] == ["source"] * 3
    assert exports.names == ["snap-0"]  # exported once, by the query's first scan
    assert a.source_snapshot == b.source_snapshot == again.source_snapshot == "snap-0"
    assert not store.live_pins()
    assert store.recent_scans(a.table.id, 1)[0].reason.startswith("another table of its source in the query must come")
    assert store.recent_scans(b.table.id, 1)[0].reason.startswith("failed over to the source: failover is on for the table;")


def test_a_table_that_fails_over_after_the_snapshot_was_fixed_still_reads_it_or_errors(store):
    first = scan(store, "a")
    b = store.get_table("src", "public", "b")
    store.set_failover(b.id, True)  # the query's decision stands: b's replica still holds seq 110
    assert scan(store, "b").route == first.route.__class__("replica", 110, "replica healthy and fresh (the query's snapshot)")
    store.set_state(b.id, "unhealthy", "damaged replica: x")
    with pytest.raises(RoutingError, match="reads its source's tables at replica seq 110.*re-run the query"):
        scan(store, "b")  # never the source now, mixed with a replica snapshot


def test_route_replica_refuses_a_query_any_of_whose_tables_needs_the_source(store):
    store.set_failover(store.get_table("src", "public", "b").id, True)
    with pytest.raises(RoutingError, match=r"public\.b: the catalog requires the replica"):
        scan(store, "a", mode="replica")


def test_the_verifiers_source_snapshot_is_used_and_nothing_is_exported(store):
    exports = Exports()
    plan = scan(store, "a", mode="source", exports=exports, source_snapshot="given")
    assert plan.route.target == "source" and plan.source_snapshot == "given" and exports.names == []


def test_time_travel_and_lone_scans_decide_alone(store):
    assert scan(store, "a", token=None).route.seq == 110
    store.commit_checkpoint("src", [], 150, time.time())
    assert scan(store, "a", token="q3", as_of_seq=105).route.seq == 105
    with pytest.raises(RoutingError, match="cannot time travel"):
        scan(store, "a", as_of_seq=1)


# --- joined scans: several tables planned in one transaction ------------------------------------


def joined(store, token=None, mode="auto", exports=None):
    reqs = [ScanRequest(source="src", schema="public", table=t, mode=mode, snapshot_token=token,
                        snapshot_tables=("cat.public.a", "cat.public.b") if token else ()) for t in ("a", "b")]
    return plan_scans(store, reqs, scans("a", "b"), RECORD, window_s=WINDOW_S, pin_ttl_s=PIN_TTL_S,
                      export=exports or Exports())


def test_a_joined_scan_pins_and_records_every_table_at_the_querys_seq(store):
    a, b = joined(store, token="q1")
    assert a.route.target == b.route.target == "replica" and a.route.seq == b.route.seq == 110
    assert a.reads and b.reads and a.reads[0].lease is not None and b.reads[0].lease is not None
    for plan in (a, b):
        assert store.recent_scans(plan.table.id, 1)[0].seq == 110


def test_a_lone_joined_scan_never_mixes_the_seqs_of_its_tables(store):
    # Without a query snapshot each table alone decides: c, copied later, is still catching up, so
    # the join reads both from the source (one statement); once c is readable, both the replica.
    c = store.add_table("src", "public", "c", [Column("id", "integer", False)], ["id"], "schema")
    store.start_copy(c.id)
    store.finish_copy(c.id, [NewDelta(c.id, "c0", 200, 200, 1, 10, 0, 0)], copy_seq=200, partition_bounds=None)
    reqs = [ScanRequest(source="src", schema="public", table=t, mode="auto") for t in ("a", "c")]
    plan = lambda: plan_scans(store, reqs, scans("a", "c"), RECORD, window_s=WINDOW_S,  # noqa: E731
                              pin_ttl_s=PIN_TTL_S, export=Exports())
    assert [p.route.target for p in plan()] == ["source", "source"]
    store.commit_checkpoint("src", [], 210, time.time())
    a, c_plan = plan()
    assert a.route.target == c_plan.route.target == "replica" and a.route.seq == c_plan.route.seq == 210


def test_a_lone_joined_scan_with_one_table_failed_over_reads_both_from_the_source(store):
    store.set_failover(store.get_table("src", "public", "b").id, True)
    exports = Exports()
    a, b = joined(store, exports=exports)
    assert a.route.target == b.route.target == "source"  # one source statement: one snapshot
    assert "a table joined with it must come from the source" in a.route.reason
    assert not store.live_pins() and exports.names == []


def test_a_joined_scan_in_a_query_that_reads_the_source_shares_its_exported_snapshot(store):
    store.set_failover(store.get_table("src", "public", "a").id, True)
    exports = Exports()
    a, b = joined(store, token="q1", exports=exports)
    assert a.route.target == b.route.target == "source"
    assert a.source_snapshot == b.source_snapshot == "snap-0" and exports.names == ["snap-0"]


def test_every_table_of_a_joined_scan_records_the_whole_plan(store):
    a, b = joined(store, token="q1")
    for plan in (a, b):
        assert store.recent_scans(plan.table.id, 1)[0].pushed == RECORD


def test_a_self_join_is_one_routing_record_and_both_reads_at_one_seq(store):
    table = store.get_table("src", "public", "a")
    reqs = [ScanRequest(source="src", schema="public", table="a", mode="auto") for _ in range(2)]
    conjunct = cmp("gt", "id", "long", 5, spark="int")
    two = [Scan("public.a", ("id",)), Scan("public.a", ("id",), (conjunct,))]
    first, second = plan_scans(store, reqs, two, RECORD, window_s=WINDOW_S, pin_ttl_s=PIN_TTL_S, export=Exports())
    assert first.route.target == second.route.target == "replica" and first.route.seq == second.route.seq == 110
    assert first.reads and second.reads
    assert [r.pushed for r in store.recent_scans(table.id, 10)] == [RECORD]


def test_time_travel_by_time_is_fixed_for_views_only_once_a_later_checkpoint_passed_it(store):
    """ViewRewrite answers `TIMESTAMP AS OF t` from a view at the seq t reads; a t no safe point
    has passed yet would read a newer seq at each resolution, so no view answers it."""
    from htap.pushdown.spark_types import TimeTravel

    a = store.get_table("src", "public", "a")
    t = time.time() + 1000  # (safe points an hour apart: each checkpoint records one)
    store.commit_checkpoint("src", [], 120, t)
    store.commit_checkpoint("src", [], 130, t + 3600)
    assert store.settled_seq_at("src", t + 1800) == 120
    assert store.settled_seq_at("src", t + 5000) is None and store.seq_at("src", t + 5000) == 130
    assert TimeTravel(None, t + 1800, WINDOW_S).seq(store, a) == 120
    assert TimeTravel(None, t + 5000, WINDOW_S).seq(store, a) is None
    assert TimeTravel("125", None, WINDOW_S).seq(store, a) == 125
    assert TimeTravel("0/7D", None, WINDOW_S).seq(store, a) == 125
    assert TimeTravel("not a seq", None, WINDOW_S).seq(store, a) is None  # (the scan says what is wrong)
