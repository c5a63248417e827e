"""The metadata side of a MySQL failover query's snapshot agreement (MetadataStore.agree_source_read):
scans of one query that read the source at different positions are caught, whichever records
second; a task retry of the same scan replaces its own record; other queries and other sources
never interfere; records go after a day. Against a real SQLite store."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from htap.replica.metadata import MetadataStore


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _store(tmp_path, clock=None):
    return MetadataStore(tmp_path / "metadata.db", create=True, clock=clock or Clock())


def test_same_position_agrees_and_a_different_one_names_the_other_scan(tmp_path):
    with _store(tmp_path) as store:
        assert store.agree_source_read("q", "src", "s1", "db.a", 100, "pos 100") == []
        assert store.agree_source_read("q", "src", "s2", "db.b", 100, "pos 100") == []
        assert store.agree_source_read("q", "src", "s3", "db.c", 120, "pos 120") == [("db.a", "pos 100"), ("db.b", "pos 100")]


def test_attempts_of_one_scan_never_conflict_but_every_attempt_of_another_counts(tmp_path):
    with _store(tmp_path) as store:
        assert store.agree_source_read("q", "src", "s1", "db.a", 100, "pos 100", "1") == []
        assert store.agree_source_read("q", "src", "s1", "db.a", 130, "pos 130", "2") == []  # its retry
        # Spark may keep either attempt's rows: a scan at 130 still disagrees with attempt 1.
        assert store.agree_source_read("q", "src", "s2", "db.b", 130, "pos 130", "3") == [("db.a", "pos 100")]
        # The same attempt recording again (a re-opened read) replaces itself.
        assert store.agree_source_read("q", "src", "s1", "db.a", 130, "pos 130", "1") == []
        assert store.agree_source_read("q", "src", "s2", "db.b", 130, "pos 130", "3") == []


def test_other_queries_and_sources_do_not_count_and_records_expire(tmp_path):
    clock = Clock()
    with _store(tmp_path, clock) as store:
        store.agree_source_read("q1", "src", "s1", "db.a", 100, "pos 100")
        store.agree_source_read("q2", "other", "s1", "db.a", 200, "pos 200")
        assert store.agree_source_read("q2", "src", "s9", "db.a", 300, "pos 300") == []
        clock.now += 86_401
        store.agree_source_read("q3", "src", "s1", "db.a", 400, "pos 400")
        assert [r[0] for r in store._all("SELECT token FROM query_source_reads")] == ["q3"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=12))
def test_each_attempt_sees_exactly_the_other_scans_attempts_elsewhere(tmp_path_factory, attempts):
    """Any order of (scan, attempt, position) records: each is told every position another
    scan's attempts read that differs from its own (so of two disagreeing attempts of different
    scans, the later one is always refused), never its own scan's."""
    store = _store(tmp_path_factory.mktemp("agree"))
    try:
        seen: dict[tuple[int, int], int] = {}
        for scan, attempt, pos in attempts:
            others = store.agree_source_read("q", "src", f"s{scan}", f"t{scan}", pos, f"p{pos}", f"{scan}.{attempt}")
            seen[(scan, attempt)] = pos
            expected = sorted({(f"t{s}", f"p{p}") for (s, _a), p in seen.items() if s != scan and p != pos})
            assert sorted(others) == expected
    finally:
        store.close()
