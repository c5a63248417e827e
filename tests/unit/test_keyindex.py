"""replica/keyindex.py: the key -> (delta, row) index answers exactly what a scan of the
partition's live deltas answers (htap.replica.dv.superseded), with composite, string and float
keys, whatever deltas were added, compacted away or removed behind its back, and when hashes
collide."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.replica import dv, keyindex
from htap.replica.keyindex import KeyIndex
from htap.replica.models import OP, SEQ

KEY = ["a", "b"]
SCHEMA = pa.schema([("a", pa.int32()), ("b", pa.string())])


def delta(versions: list[tuple[tuple, int, int]]) -> pa.Table:
    """A key-sorted delta (key ASC, seq DESC) from (key, seq, op) versions, one per (key, seq)."""
    seen = {}
    for k, seq, op in versions:
        seen[(k, seq)] = op
    rows = sorted(seen.items(), key=lambda r: (r[0][0], -r[0][1]))
    return pa.table({"a": pa.array([r[0][0][0] for r in rows], pa.int32()),
                     "b": pa.array([r[0][0][1] for r in rows], pa.string()),
                     SEQ: pa.array([r[0][1] for r in rows], pa.int64()),
                     OP: pa.array([r[1] for r in rows], pa.int8())})


def write(root: Path, data: pa.Table) -> str:
    rel = f"p/{uuid.uuid4().hex}.parquet"
    (root / "p").mkdir(exist_ok=True)
    pq.write_table(data, root / rel)
    return rel


def entries(t: pa.Table) -> list[tuple]:
    return sorted(zip(t.column("target").to_pylist(), t.column("row").to_pylist(), t.column("seq").to_pylist()))


keys = st.tuples(st.integers(0, 6), st.sampled_from(["", "x", "y", "ü"]))
batch = st.lists(st.tuples(keys, st.integers(0, 1)), min_size=1, max_size=12)


@PROPERTY
@given(st.data())
def test_the_index_answers_what_a_scan_of_the_live_deltas_answers(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("idx")
    (root / "p").mkdir()
    index, live, seq = KeyIndex(SCHEMA), [], 0
    for step in range(data.draw(st.integers(1, 8), label="checkpoints")):
        versions = []
        for k, op in data.draw(batch, label="changes"):
            seq += data.draw(st.integers(0, 1))  # several versions of a key in one delta, sometimes
            versions.append((k, seq + 1, op))
        seq += 1
        new = delta(versions)
        rel = f"p/{uuid.uuid4().hex}.parquet"
        what = data.draw(st.sampled_from(["current", "dropped", "behind", "delta removed", "newest removed",
                                          "merged elsewhere"]), label="index state")
        if what == "dropped":
            index = KeyIndex(SCHEMA)  # e.g. a restart: built from the deltas at first use
        elif what == "behind" and live:
            index.covers = index.covers - {live[-1]}  # as if another process wrote the last delta
        elif what == "delta removed" and len(live) > 1:
            live.pop(0)  # behind its back: its keys are found again in the others
        elif what == "newest removed" and live:
            live.pop()  # a checkpoint that never committed: its keys' older versions count again
        elif what == "merged elsewhere" and len(live) > 1:
            # Another process merged two deltas (any two: a tier is picked by size), keeping every version.
            i, j = sorted(data.draw(st.lists(st.integers(0, len(live) - 1), min_size=2, max_size=2, unique=True),
                                    label="merged"))
            both = pa.concat_tables([pq.read_table(root / live[i]), pq.read_table(root / live[j])])
            merged = both.sort_by([("a", "ascending"), ("b", "ascending"), (SEQ, "descending")])
            live[i:i + 1] = [write(root, merged)]
            live.pop(j)
        want = entries(dv.superseded(new, KEY, root, live))
        index.sync(root, live)
        assert index.covers == frozenset(live)
        found, hit = index.supersede(new, rel)
        assert entries(found) == want
        first, _ = keyindex.newest_per_key(new, KEY)
        assert hit.sum() == len(want) and len(hit) == len(first)
        pq.write_table(new, root / rel)
        live.append(rel)
        assert index.covers == frozenset(live)


def test_compaction_swaps_its_inputs_for_its_output(tmp_path):
    index = KeyIndex(SCHEMA)
    old = write(tmp_path, delta([((1, "x"), 1, 0), ((2, "x"), 1, 0), ((3, "y"), 1, 0)]))
    mid = write(tmp_path, delta([((1, "x"), 2, 0), ((2, "x"), 2, 1)]))
    index.sync(tmp_path, [old, mid])
    # A base merge of both that folded the delete of (2, "x") and the old (1, "x") away.
    merged = delta([((1, "x"), 2, 0), ((3, "y"), 1, 0)])
    out = write(tmp_path, merged)
    index.replace([old, mid], out, merged)
    assert index.covers == {out}
    fresh = KeyIndex(SCHEMA)
    fresh.sync(tmp_path, [out])
    probe = delta([((1, "x"), 3, 0), ((2, "x"), 3, 0), ((3, "y"), 3, 0)])
    a, _ = index.supersede(probe, "p/next.parquet")
    b, _ = fresh.supersede(probe, "p/next.parquet")
    assert entries(a) == entries(b) == [(out, 0, 3), (out, 1, 3)]


def test_colliding_hashes_are_told_apart_by_the_keys():
    index = KeyIndex(SCHEMA)
    stored = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": ["x", "y", "z"]})
    same = np.zeros(3, np.uint64)  # every key hashes alike
    index._put(stored, index._code("d"), np.array([10, 11, 12]), np.array([5, 5, 5]), h=same)
    probe = pa.table({"a": pa.array([3, 4, 1], pa.int32()), "b": ["z", "x", "x"]})
    assert index.find(probe, np.zeros(3, np.uint64)).tolist() == [2, -1, 0]


def test_float_keys_nan_and_signed_zero():
    schema = pa.schema([("f", pa.float64())])
    index = KeyIndex(schema)
    stored = pa.table({"f": [math.nan, 0.0, 1.5]})
    index._put(stored, index._code("d"), np.array([0, 1, 2]), np.array([1, 1, 1]))
    probe = pa.table({"f": [1.5, math.nan, -0.0, 2.0]})
    assert index.find(probe).tolist() == [2, 0, 1, -1]


def test_registry_keeps_the_recently_used_and_forgets_on_request(tmp_path):
    keyindex.forget()
    a = keyindex.of(tmp_path / "a", SCHEMA)
    assert keyindex.of(tmp_path / "a", SCHEMA) is a
    assert keyindex.of(tmp_path / "a", pa.schema([("a", pa.int64())])) is not a  # another key: a new one
    keyindex.forget(tmp_path / "a")
    assert keyindex.peek(tmp_path / "a") is None
    big = keyindex.of(tmp_path / "big", SCHEMA)
    big._put(pa.table({"a": pa.array(range(3), pa.int32()), "b": ["x"] * 3}), 0, np.arange(3), np.ones(3, np.int64))
    keeps = keyindex.KEEP
    try:
        keyindex.KEEP = 2  # entries
        keyindex.of(tmp_path / "small", SCHEMA)
        assert keyindex.peek(tmp_path / "big") is None and keyindex.peek(tmp_path / "small") is not None
    finally:
        keyindex.KEEP = keeps
        keyindex.forget()


@PROPERTY
@given(st.data())
def test_a_tier_merge_swapped_in_place_or_a_whole_merge_indexed_ahead_equals_a_rebuild(tmp_path_factory, data):
    """A compaction's in-place swap (a tier merge of some deltas: every version kept) and the index
    a merge of the whole partition builds for its output before the lock (`of_delta`, then `sync`
    with the deltas committed meanwhile) answer what an index built from the live deltas does."""
    root = tmp_path_factory.mktemp("swap")
    (root / "p").mkdir()
    index, live, tables, seq = KeyIndex(SCHEMA), [], {}, 0
    for _ in range(data.draw(st.integers(2, 6), label="deltas")):
        seq += 1
        new = delta([(k, seq, op) for k, op in data.draw(batch, label="changes")])
        rel = write(root, new)
        index.sync(root, live)
        index.supersede(new, rel)
        live.append(rel)
        tables[rel] = new
    whole = data.draw(st.booleans(), label="whole partition")
    chosen = list(live) if whole else data.draw(st.lists(st.sampled_from(live), min_size=2, unique=True), label="merged")
    merged = pa.concat_tables([tables[r] for r in chosen]).sort_by([("a", "ascending"), ("b", "ascending"), (SEQ, "descending")])
    out = write(root, merged)
    later = []
    if whole:
        ahead = KeyIndex.of_delta(SCHEMA, out, merged)
        for _ in range(data.draw(st.integers(0, 2), label="committed meanwhile")):
            seq += 1
            later.append(write(root, delta([(k, seq, op) for k, op in data.draw(batch, label="later")])))
        ahead.sync(root, [out, *later])
        index = ahead
    else:
        index.replace(chosen, out, merged)
    live = [r for r in live if r not in chosen] + [out] + later
    assert index.covers == frozenset(live)
    fresh = KeyIndex(SCHEMA)
    fresh.sync(root, live)
    probe = delta([(k, seq + 1, 0) for k, _ in data.draw(batch, label="probe")])
    a, _ = index.supersede(probe, "p/next.parquet")
    b, _ = fresh.supersede(probe, "p/next.parquet")
    assert entries(a) == entries(b) == entries(dv.superseded(probe, KEY, root, live))


def test_single_integer_keys_hash_without_duckdb_and_are_found():
    schema = pa.schema([("id", pa.int64())])
    stored = pa.table({"id": pa.array([-(2**63), -1, 0, 7, 2**63 - 1], pa.int64())})
    h = keyindex.hashes(stored)
    assert h.dtype == np.uint64 and len(set(h.tolist())) == 5
    assert keyindex.hashes(stored.slice(3, 1)).tolist() == h[3:4].tolist()  # a key's hash is its own
    index = KeyIndex(schema)
    index._put(stored, index._code("d"), np.arange(5), np.ones(5, np.int64))
    probe = pa.table({"id": pa.array([7, 8, -1, 2**63 - 1], pa.int64())})
    assert index.find(probe).tolist() == [3, -1, 1, 4]
