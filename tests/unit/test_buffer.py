"""ingest/buffer.py TableBuffer: versions buffered between checkpoints."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY, make_table

from htap.connectors.changes import UNSET
from htap.ingest.buffer import MAX_PARTIAL_COLUMNS, SchemaChanged, TableBuffer
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, ORD, SEQ, UNSET_MASK

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.int32()), ("c", pa.decimal128(6, 2))])


def buffer(schema=SCHEMA, key=("id",)):
    return TableBuffer(make_table(schema, key))


def rows(buf: TableBuffer) -> list[tuple]:
    """(values..., seq, op, mask) per buffered version, in arrival order."""
    return [(*vals, s, o, m) for *vals, s, o, m in zip(*buf.columns, buf.seqs, buf.ops, buf.unset)]


def test_upserts_and_deletes_in_arrival_order():
    buf = buffer()
    buf.upsert([1, "x", 10, decimal.Decimal("1.5")], 5)
    buf.delete([2, "ignored", 99, None], 5)
    buf.upsert([1, "y", None, None], 6)
    assert rows(buf) == [
        (1, "x", 10, decimal.Decimal("1.5"), 5, OP_UPSERT, 0),
        (2, None, None, None, 5, OP_DELETE, 0),  # a delete keeps only the key
        (1, "y", None, None, 6, OP_UPSERT, 0),  # a sent NULL is a value, not unset
    ]
    assert len(buf) == 3 and buf.pending()


def test_a_partial_update_is_filled_from_the_newest_buffered_version():
    buf = buffer()
    buf.upsert([1, "x", 10, None], 5)
    buf.upsert([1, "y", UNSET, UNSET], 6)
    buf.upsert([1, UNSET, 20, UNSET], 7)
    assert rows(buf)[1:] == [(1, "y", 10, None, 6, OP_UPSERT, 0), (1, "y", 20, None, 7, OP_UPSERT, 0)]


def test_without_a_buffered_version_unset_columns_are_masked():
    buf = buffer()
    buf.upsert([1, UNSET, 3, UNSET], 5)
    assert rows(buf) == [(1, None, 3, None, 5, OP_UPSERT, 0b1010)]  # bit i: column i was not sent


def test_mask_bits_carry_over_when_the_buffered_version_was_partial_too():
    buf = buffer()
    buf.upsert([1, UNSET, 3, UNSET], 5)  # a and c unknown here
    buf.upsert([1, "new", UNSET, UNSET], 6)  # b filled from seq 5; c still unknown
    assert rows(buf)[1] == (1, "new", 3, None, 6, OP_UPSERT, 0b1000)


def test_a_buffered_delete_is_no_base_for_a_partial_update():
    buf = buffer()
    buf.upsert([1, "x", 10, None], 5)
    buf.delete([1, None, None, None], 6)
    buf.upsert([1, UNSET, 11, UNSET], 7)
    assert rows(buf)[2] == (1, None, 11, None, 7, OP_UPSERT, 0b1010)


def test_partial_updates_fill_per_key():
    buf = buffer()
    buf.upsert([1, "one", 1, None], 5)
    buf.upsert([2, "two", 2, None], 5)
    buf.upsert([2, UNSET, 22, UNSET], 6)
    assert rows(buf)[2] == (2, "two", 22, None, 6, OP_UPSERT, 0)


def test_composite_keys():
    schema = pa.schema([("r", pa.string()), ("id", pa.int64()), ("v", pa.string())])
    buf = buffer(schema, key=("id", "r"))
    buf.upsert(["eu", 1, "a"], 5)
    buf.upsert(["us", 1, "b"], 5)
    buf.upsert(["eu", 1, UNSET], 6)
    assert buf.key_of(["eu", 1, "zzz"]) == (1, "eu")
    assert rows(buf)[2] == ("eu", 1, "a", 6, OP_UPSERT, 0)
    buf.delete(["us", 1, "gone"], 7)
    assert rows(buf)[3] == ("us", 1, None, 7, OP_DELETE, 0)


def test_truncate_drops_the_transactions_earlier_rows_and_keeps_older_ones():
    buf = buffer()
    buf.upsert([1, "x", 1, None], 5)
    buf.upsert([2, "y", 2, None], 6)
    buf.upsert([3, "z", 3, None], 6)
    buf.truncate(6)
    assert rows(buf) == [(1, "x", 1, None, 5, OP_UPSERT, 0)]
    buf.upsert([4, "after", 4, None], 6)  # inserted after the truncate, same transaction
    assert [r[0] for r in rows(buf)] == [1, 4]


def test_after_a_truncate_no_older_version_is_a_base():
    buf = buffer()
    buf.upsert([1, "x", 1, None], 5)
    buf.truncate(6)
    buf.upsert([1, UNSET, 2, UNSET], 7)
    assert rows(buf)[-1] == (1, None, 2, None, 7, OP_UPSERT, 0b1010)


def test_truncate_of_an_empty_buffer():
    buf = buffer()
    buf.truncate(3)
    assert len(buf) == 0


def test_drain_types_and_bookkeeping_columns():
    buf = buffer()
    buf.upsert([1, "x", 10, decimal.Decimal("1.50")], 5)
    buf.upsert([1, UNSET, 11, UNSET], 6)
    buf.delete([2, None, None, None], 7)
    data = buf.drain()
    assert data.schema == pa.schema([
        *SCHEMA, pa.field(SEQ, pa.int64()), pa.field(OP, pa.int8()), pa.field(UNSET_MASK, pa.int64()), pa.field(ORD, pa.int64())
    ])
    assert data.to_pylist() == [
        {"id": 1, "a": "x", "b": 10, "c": decimal.Decimal("1.50"), SEQ: 5, OP: 0, UNSET_MASK: 0, ORD: 0},
        {"id": 1, "a": "x", "b": 11, "c": decimal.Decimal("1.50"), SEQ: 6, OP: 0, UNSET_MASK: 0, ORD: 1},
        {"id": 2, "a": None, "b": None, "c": None, SEQ: 7, OP: 1, UNSET_MASK: 0, ORD: 2},
    ]
    assert len(buf) == 0 and not buf.pending()
    assert buf.drain().num_rows == 0  # and it starts afresh
    buf.upsert([1, UNSET, 3, UNSET], 8)  # the drained versions are no base any more
    assert rows(buf)[0][-1] == 0b1010


def test_drain_uses_the_sources_decoder():
    calls = []

    def decode(values, type_):  # like Postgres': values arrive as text
        calls.append(type_)
        if pa.types.is_integer(type_):
            values = [None if v is None else int(v) for v in values]
        return pa.array(values, type_)

    buf = TableBuffer(make_table(pa.schema([("id", pa.int64()), ("v", pa.string())])), decode)
    buf.upsert(["7", "x"], 1)
    assert buf.drain().column("id").to_pylist() == [7]
    assert calls == [pa.int64(), pa.string()]


def test_only_the_first_63_columns_can_be_unset():
    schema = pa.schema([("id", pa.int64())] + [(f"c{i}", pa.int32()) for i in range(1, 70)])
    buf = buffer(schema)
    ok = [1] + [UNSET] * (MAX_PARTIAL_COLUMNS - 1) + [0] * (70 - MAX_PARTIAL_COLUMNS)
    buf.upsert(ok, 5)
    assert buf.unset[0] == (1 << MAX_PARTIAL_COLUMNS) - 2  # bits 1..62
    bad = [1] + [0] * 62 + [UNSET] + [0] * 6  # column 63
    with pytest.raises(SchemaChanged, match="partial update left column 'c63' unset.*REPLICA IDENTITY FULL"):
        buf.upsert(bad, 6)


def test_check_columns():
    buf = buffer()
    buf.check_columns(("id", "a", "b", "c"))
    with pytest.raises(SchemaChanged, match=r"public.t changed in the source: columns are now \['id', 'a'\]"):
        buf.check_columns(("id", "a"))


def test_retable_freezes_what_was_buffered_under_the_old_schema():
    old = make_table(SCHEMA)
    new_schema = SCHEMA.append(pa.field("d", pa.string()))
    new = make_table(new_schema, schema_version=2, added={"d": 2})
    buf = TableBuffer(old)
    buf.upsert([1, "x", 1, None], 5)
    buf.retable(new)
    assert len(buf) == 0 and buf.pending()
    assert buf.names == ["id", "a", "b", "c", "d"]
    buf.upsert([1, UNSET, 2, UNSET, "d"], 6)  # nothing buffered under the new schema: masked
    assert buf.unset == [0b01010]
    parts = buf.drain_all()
    assert [(t.schema_version, d.column_names[:5], d.num_rows) for t, d in parts] == [
        (1, ["id", "a", "b", "c", SEQ], 1), (2, ["id", "a", "b", "c", "d"], 1)
    ]
    assert not buf.pending() and buf.drain_all() == []


def test_retable_of_an_empty_buffer_freezes_nothing():
    buf = buffer()
    buf.retable(make_table(SCHEMA, schema_version=2))
    assert buf.frozen == [] and not buf.pending()


# --- batches (RowBatch): the same outcome as their rows one by one --------------------------

TEXT_SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.int32())])


def from_text(values, type_):
    """Like Postgres' decode_column: text values (a list, or an Arrow array of batches) -> type_."""
    return pc.cast(values if isinstance(values, pa.Array) else pa.array(values, pa.string()), type_)


keys = st.integers(0, 6).map(str)
cells = st.one_of(st.none(), st.text(max_size=4))
numbers = st.one_of(st.none(), st.integers(-5, 5).map(str))
changes = st.one_of(
    st.tuples(st.just("upsert"), keys, cells, numbers),
    st.tuples(st.just("upsert"), keys, st.one_of(cells, st.just(UNSET)), st.one_of(numbers, st.just(UNSET))),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("truncate")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("drain")),
)


@PROPERTY
@given(st.lists(changes, max_size=60), st.lists(st.integers(1, 5), min_size=1, max_size=8))
def test_batches_buffer_as_their_rows_one_by_one(script, cuts):
    """Full upserts and deletes of one transaction go in as batches of random sizes (Arrow text
    columns, as the Postgres stream sends them), everything else row by row, on one buffer;
    another buffer takes every row one by one. Partial rows after batches fill from them,
    truncations cut into them, and each drain gives the same table."""
    rowwise = TableBuffer(make_table(TEXT_SCHEMA), from_text)
    batched = TableBuffer(make_table(TEXT_SCHEMA), from_text)
    seq, pending, n = 1, [], 0  # pending: full upserts or deletes waiting to go in as a batch

    def flush():
        nonlocal pending, n
        while pending:
            op = pending[0][0]
            run = next((i for i, c in enumerate(pending) if c[0] != op), len(pending))
            size = min(cuts[n % len(cuts)], run)
            n += 1
            chunk, pending = pending[:size], pending[size:]
            columns = [pa.array([c[1] for c in chunk], pa.string())]
            if op == "upsert":
                columns += [pa.array([c[2] for c in chunk], pa.string()), pa.array([c[3] for c in chunk], pa.string())]
            else:
                columns += [pa.array(["junk"] * size, pa.string()), pa.array(["9"] * size, pa.string())]
            batched.append_batch(columns, seq, delete=op == "delete")

    drains = []
    for change in script:
        kind = change[0]
        if kind == "upsert":
            values = list(change[1:])
            rowwise.upsert(values, seq)
            if UNSET in values:
                flush()
                batched.upsert(values, seq)
            else:
                pending.append(change)
        elif kind == "delete":
            rowwise.delete([change[1], "junk", "9"], seq)
            pending.append(change)
        else:
            flush()
            if kind == "truncate":
                rowwise.truncate(seq)
                batched.truncate(seq)
            elif kind == "commit":
                seq += 1
            else:
                drains.append((rowwise.drain(), batched.drain()))
        assert len(rowwise) == len(batched) + len(pending)
    flush()
    drains.append((rowwise.drain(), batched.drain()))
    for want, got in drains:
        assert got.equals(want), (got.to_pylist(), want.to_pylist())
