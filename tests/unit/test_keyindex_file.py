"""replica/keyindex_file.py: a stored key index is read back exactly, and one that is truncated,
has flipped bytes, another format, another folder's or other key columns, or covers deltas no
longer live is never used: the partition's index is rebuilt from the deltas and answers what a
scan of them answers."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import REGISTRY
from test_keyindex import KEY, SCHEMA, delta, entries, write

from htap.replica import dv, keyindex, keyindex_file
from htap.replica.keyindex import KeyIndex


def opens(outcome: str) -> float:
    return REGISTRY.get_sample_value("htap_key_index_opens_total", {"outcome": outcome}) or 0.0


@pytest.fixture
def partition(tmp_path):
    """A partition of three deltas under `tmp_path` whose index this process built and stored."""
    keyindex.forget()
    live = [write(tmp_path, delta([((k, "x"), 1, 0) for k in range(50)] + [((k, "y"), 1, 0) for k in range(5)])),
            write(tmp_path, delta([((k, "x"), 2, 0) for k in range(0, 50, 3)])),
            write(tmp_path, delta([((k, "x"), 3, 1) for k in range(0, 50, 7)]))]
    folder = tmp_path / "locks"
    folder.mkdir()  # (the partition's lock folder: its writer lock makes it)
    index = keyindex.of(folder, SCHEMA)
    index.sync(tmp_path, live)
    assert keyindex.flush() == 1 and keyindex_file.path_of(folder).is_file()
    assert keyindex.flush() == 0  # nothing changed since
    yield tmp_path, folder, live
    keyindex.forget()


def probe_answers(index: KeyIndex, root, live) -> None:
    probe = delta([((k, b), 9, 0) for k in range(0, 60, 2) for b in ("x", "y", "z")])
    found, _ = index.supersede(probe, "p/probe.parquet")
    assert entries(found) == entries(dv.superseded(probe, KEY, root, live))


def reopened(folder) -> KeyIndex:
    keyindex.forget()  # as a restart: this process's indexes are gone, the stored copies stay
    return keyindex.of(folder, SCHEMA)


def test_a_stored_index_is_read_back_and_used(partition):
    root, folder, live = partition
    before = opens("loaded")
    index = reopened(folder)
    assert index.opened == "loaded" and index.covers == frozenset(live)
    index.sync(root, live)
    assert opens("loaded") == before + 1
    probe_answers(index, root, live)


def test_a_stored_index_behind_the_live_deltas_reads_only_the_added_ones(partition):
    root, folder, live = partition
    added = write(root, delta([((k, "x"), 4, 0) for k in range(3, 40, 4)]))
    index = reopened(folder)
    assert index.missing([*live, added]) == [added]
    index.sync(root, [*live, added])
    assert index.opened is None and index.dirty  # caught up: to be stored again
    probe_answers(index, root, [*live, added])


def flip(raw: bytes) -> bytes:
    at = len(raw) // 2
    return raw[:at] + bytes([raw[at] ^ 0x5A]) + raw[at + 1:]


def other_format(raw: bytes) -> bytes:
    magic, _, crc, length = struct.unpack_from("<8sIIQ", raw)
    return struct.pack("<8sIIQ", magic, keyindex_file.FORMAT + 1, crc, length) + raw[24:]


@pytest.mark.parametrize("damage", [
    lambda raw: raw[: len(raw) - 100],  # truncated (a write cut short)
    lambda raw: raw[:10],  # truncated inside the header
    lambda raw: b"",  # empty (a rename that survived a power loss, its data not)
    flip,  # bytes flipped
    other_format,
    lambda raw: b"not an index" * 10,
])
def test_a_damaged_stored_index_is_rebuilt_never_used(partition, damage):
    root, folder, live = partition
    path = keyindex_file.path_of(folder)
    path.write_bytes(damage(path.read_bytes()))
    before = opens("damaged")
    index = reopened(folder)
    assert index.opened == "damaged" and not index.built
    index.sync(root, live)
    assert opens("damaged") == before + 1
    probe_answers(index, root, live)
    assert keyindex.flush() == 1 and reopened(folder).opened == "loaded"  # stored whole again


def test_another_partitions_or_other_keys_index_is_not_used(partition, tmp_path_factory):
    root, folder, live = partition
    other = tmp_path_factory.mktemp("other")
    (other / keyindex_file.FILE).write_bytes(keyindex_file.path_of(folder).read_bytes())  # copied over
    assert keyindex.of(other, SCHEMA).opened == "damaged"
    keyindex.forget()
    assert keyindex.of(folder, pa.schema([("a", pa.int64()), ("b", pa.string())])).opened == "damaged"


def test_stored_hashes_that_differ_from_the_keys_are_caught(partition):
    root, folder, live = partition
    index = reopened(folder)
    stored = index.snapshot()
    h = stored.h.copy()
    h[len(h) // 2:] += np.uint64(1)  # still sorted, wrong (as from another hash function)
    keyindex_file.write(folder, keyindex_file.Stored(stored.keys, stored.target, stored.row, stored.seq, h,
                                                     stored.order, stored.paths, stored.covers, stored.folder,
                                                     stored.scheme))
    assert "hashes" in keyindex_file.read(folder, SCHEMA, stored.scheme, keyindex.hashes)
    assert "hashed by" in keyindex_file.read(folder, SCHEMA, "another hash", keyindex.hashes)


def test_a_stale_stored_index_is_caught_up(partition):
    """One covering a delta no longer live (compacted away since it was written, or written by a
    checkpoint that never committed) drops that delta's entries and finds their keys again in
    the live deltas: it answers what a rebuild answers."""
    root, folder, live = partition
    before = opens("stale")
    index = reopened(folder)
    index.sync(root, live[1:])
    assert opens("stale") == before + 1
    probe_answers(index, root, live[1:])


def test_forgetting_a_partition_drops_its_stored_copy_and_pending_writes(partition):
    root, folder, live = partition
    index = reopened(folder)
    index.sync(root, [*live, write(root, delta([((1, "x"), 5, 0)]))])  # changed: a write is due
    keyindex.forget(folder)
    assert not keyindex_file.path_of(folder).exists()
    assert keyindex.flush() == 0 and not keyindex_file.path_of(folder).exists()


def test_an_index_changed_again_is_stored_at_most_every_min_age(partition):
    root, folder, live = partition
    index = reopened(folder)
    index.sync(root, [*live, write(root, delta([((1, "x"), 5, 0)]))])
    assert keyindex.flush(min_age_s=3600) == 0  # read a moment ago: not due yet
    assert keyindex.flush() == 1
    installed = KeyIndex.of_delta(SCHEMA, live[0], delta([((1, "x"), 1, 0)]))
    keyindex.install(folder, installed)  # a base compaction's: as often as the one it replaces
    assert keyindex.flush(min_age_s=3600) == 0
    keyindex.forget()
    keyindex.install(folder, KeyIndex.of_delta(SCHEMA, live[0], delta([((1, "x"), 1, 0)])))  # a copy's too
    assert keyindex.flush(min_age_s=3600) == 0 and keyindex.flush() == 1
    keyindex_file.remove(folder)
    rebuilt = reopened(folder)  # none stored: rebuilt at its first use, and stored at once
    rebuilt.sync(root, live)
    assert keyindex.flush(min_age_s=3600) == 1
