"""The service's in-memory tail as a data structure (htap.ingest.tail.TailStore): what a pin
holds, where a table's tail stops, what a checkpoint drops, and the memory bound."""

from __future__ import annotations

import pyarrow as pa
import pytest

from htap.ingest.tail import TailStore
from htap.replica.models import OP, ORD, SEQ, UNSET_MASK
from htap.replica.partitions import encode_bounds

from storage_support import ManualClock


def rows(keys: list[int], seq: int) -> pa.Table:
    n = len(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), SEQ: pa.array([seq] * n, pa.int64()),
                     OP: pa.array([1] * n, pa.int8()), UNSET_MASK: pa.array([0] * n, pa.int64()),
                     ORD: pa.array(range(n), pa.int64())})


def test_a_pin_holds_every_segment_above_the_durable_seq_and_limits_stop_at_a_table_that_is_not_whole():
    store = TailStore("s", 1 << 30, clock=ManualClock())
    store.restart(10)
    store.publish(11, {1: rows([1, 50], 11), 2: rows([7], 11)}, {1, 2}, {1, 2})
    store.publish(12, {1: rows([2], 12)}, {1}, {1, 2})  # table 2 truncated at 12: not whole past 11
    store.publish(13, {}, {1}, {1, 2})
    pinned = store.pin([1, 2, 3], 60.0)
    assert (pinned["durable"], pinned["visible"]) == (10, 13)
    assert pinned["limits"] == {1: 13, 2: 11}  # table 3 is not followed: absent
    assert store.status()["tables"] == {"1": 13, "2": 11}  # what operations show per table
    store.checkpointed(12)  # the pin keeps what the checkpoint made durable
    got = store.rows(pinned["ticket"], 1, 10, 13, "k", None, 0)
    assert sorted(got.column("k").to_pylist()) == [1, 2, 50]
    assert store.rows(pinned["ticket"], 1, 11, 13, "k", None, 0).column("k").to_pylist() == [2]  # above the reader's durable
    splits = encode_bounds(pa.array([40], pa.int64()))
    assert store.rows(pinned["ticket"], 1, 10, 13, "k", splits, 1).column("k").to_pylist() == [50]  # one partition
    with pytest.raises(ValueError, match="whole only up to seq 11"):
        store.rows(pinned["ticket"], 2, 10, 13, "k", None, 0)
    assert store.pin([1, 2], 60.0)["durable"] == 12  # a new pin: only what is not durable yet
    store.release(pinned["ticket"])
    assert store.rows(pinned["ticket"], 1, 10, 13, "k", None, 0) is None


def test_pins_end_with_their_ttl_unless_renewed():
    clock = ManualClock()
    store = TailStore("s", 1 << 30, clock=clock)
    store.publish(1, {1: rows([1], 1)}, {1}, {1})
    a, b = store.pin([1], 10.0)["ticket"], store.pin([1], 10.0)["ticket"]
    clock.advance(8)
    store.renew(a, 10.0)
    clock.advance(5)
    assert store.rows(a, 1, 0, 1, "k", None, 0) is not None and store.rows(b, 1, 0, 1, "k", None, 0) is None
    assert store.status()["pins"] == 1


def test_memory_bound_asks_for_a_checkpoint_and_pins_count_until_released():
    store = TailStore("s", max_bytes=1, clock=ManualClock())
    assert not store.over_limit() and not store.full()
    store.publish(1, {1: rows([1, 2, 3], 1)}, {1}, {1})
    assert store.over_limit() and store.full()
    ticket = store.pin([1], 60.0)["ticket"]
    store.checkpointed(1)
    assert not store.over_limit() and store.full()  # the pin still holds the segment
    store.release(ticket)
    assert not store.full() and store.status() == {"durable": 1, "visible": 1, "bytes": 0, "pins": 0, "tables": {"1": 1}}
