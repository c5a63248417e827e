"""connectors/pgoutput.py: pgoutput protocol-1 messages built by hand, byte by byte, as the
Postgres docs ("Logical Replication Message Formats") lay them out."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.connectors.changes import UNSET
from htap.connectors.pgoutput import (
    PG_EPOCH_OFFSET_S,
    Begin,
    Commit,
    Delete,
    Ignored,
    Insert,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
    decode,
    decode_streamed,
    tuple_columns,
)

# --- building messages ------------------------------------------------------------------------


def pg_time(unix_s: float) -> int:
    """Microseconds since 2000-01-01, as pgoutput sends timestamps."""
    return round((unix_s - PG_EPOCH_OFFSET_S) * 1_000_000)


def cstring(s: str) -> bytes:
    return s.encode() + b"\x00"


def tuple_data(values) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNSET:
            out += b"u"
        else:
            raw = v.encode() if isinstance(v, str) else v
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def begin(final_lsn: int, unix_s: float, xid: int) -> bytes:
    return b"B" + struct.pack("!QqI", final_lsn, pg_time(unix_s), xid)


def commit(lsn: int, end_lsn: int, unix_s: float, flags: int = 0) -> bytes:
    return b"C" + struct.pack("!bQQq", flags, lsn, end_lsn, pg_time(unix_s))


def relation(relid: int, schema: str, name: str, columns: list[tuple[str, int, bool]], identity: bytes = b"d") -> bytes:
    out = b"R" + struct.pack("!I", relid) + cstring(schema) + cstring(name) + identity + struct.pack("!h", len(columns))
    for col, oid, is_key in columns:
        out += struct.pack("!b", 1 if is_key else 0) + cstring(col) + struct.pack("!Ii", oid, -1)
    return out


def insert(relid: int, values) -> bytes:
    return b"I" + struct.pack("!I", relid) + b"N" + tuple_data(values)


def update(relid: int, new, old=None, old_kind: bytes = b"K") -> bytes:
    out = b"U" + struct.pack("!I", relid)
    if old is not None:
        out += old_kind + tuple_data(old)
    return out + b"N" + tuple_data(new)


def delete(relid: int, old, kind: bytes = b"K") -> bytes:
    return b"D" + struct.pack("!I", relid) + kind + tuple_data(old)


def truncate(relids, options: int = 0) -> bytes:
    return b"T" + struct.pack("!Ib", len(relids), options) + struct.pack(f"!{len(relids)}I", *relids)


# --- decoding ---------------------------------------------------------------------------------


def test_begin():
    msg = decode(begin(0x16B374D848, 1_700_000_000.123456, 771))
    assert msg == Begin(0x16B374D848, pytest.approx(1_700_000_000.123456, abs=1e-6), 771)
    assert isinstance(msg, Begin)


def test_begin_before_the_postgres_epoch():
    assert decode(begin(1, 0.0, 1)).commit_time == 0.0
    assert decode(begin(1, 946_684_799.5, 1)).commit_time == pytest.approx(946_684_799.5)


def test_commit():
    msg = decode(commit(0x100, 0x1A8, 1_700_000_000.5))
    assert msg == Commit(0x100, 0x1A8, 1_700_000_000.5)


def test_relation():
    cols = [("id", 20, True), ("note", 25, False), ("é", 1700, False)]
    msg = decode(relation(16384, "public", "orders", cols, identity=b"f"))
    assert msg == Relation(16384, "public", "orders", ("id", "note", "é"), (20, 25, 1700))


def test_relation_without_columns():
    assert decode(relation(1, "s", "t", [])) == Relation(1, "s", "t", (), ())


def test_insert_with_text_nulls_empty_strings_and_utf8():
    msg = decode(insert(16384, ["1", None, "", "naïve ✓", "line\nbreak"]))
    assert msg == Insert(16384, ["1", None, "", "naïve ✓", "line\nbreak"])


def test_update_without_old_tuple():
    assert decode(update(7, ["1", "b"])) == Update(7, None, ["1", "b"])


def test_update_with_old_key():
    # REPLICA IDENTITY DEFAULT and a changed key: 'K' carries the key, nulls elsewhere
    msg = decode(update(7, ["2", "b"], old=["1", None], old_kind=b"K"))
    assert msg == Update(7, ["1", None], ["2", "b"])


def test_update_with_old_row():
    msg = decode(update(7, ["1", "new"], old=["1", "old"], old_kind=b"O"))
    assert msg == Update(7, ["1", "old"], ["1", "new"])


def test_update_with_unchanged_toast_values():
    msg = decode(update(7, ["1", UNSET, None, "x"]))
    assert msg.new == ["1", UNSET, None, "x"]
    assert msg.new[1] is UNSET


def test_delete_by_key_and_by_full_row():
    assert decode(delete(9, ["5", None], kind=b"K")) == Delete(9, ["5", None])
    assert decode(delete(9, ["5", "gone"], kind=b"O")) == Delete(9, ["5", "gone"])


@pytest.mark.parametrize("relids,options", [([1], 0), ([16384, 16390, 2**32 - 1], 1), ([5], 2)])
def test_truncate(relids, options):
    assert decode(truncate(relids, options)) == Truncate(tuple(relids))


@pytest.mark.parametrize("tag", [b"O", b"Y", b"M"])
def test_other_messages_are_ignored_by_tag(tag):
    assert decode(tag + b"\x00\x00\x00\x01rest") == Ignored(tag.decode())


def test_an_unknown_tuple_value_kind_is_an_error():
    bad = b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"b" + struct.pack("!i", 1) + b"\x01"
    with pytest.raises(ValueError, match="unknown pgoutput tuple value kind 'b'"):
        decode(bad)


def test_a_transaction_in_order():
    msgs = [
        begin(0x200, 1_700_000_000.0, 42),
        relation(1, "public", "t", [("id", 23, True), ("v", 25, False)]),
        insert(1, ["1", "a"]),
        update(1, ["1", UNSET]),
        delete(1, ["1", None]),
        truncate([1]),
        commit(0x1F0, 0x200, 1_700_000_000.0),
    ]
    kinds = [type(decode(m)).__name__ for m in msgs]
    assert kinds == ["Begin", "Relation", "Insert", "Update", "Delete", "Truncate", "Commit"]


values = st.lists(st.one_of(st.none(), st.just(UNSET), st.text(max_size=20)), max_size=12)


@PROPERTY
@given(st.integers(0, 2**32 - 1), values, st.one_of(st.none(), values), st.sampled_from([b"K", b"O"]))
def test_tuples_round_trip(relid, new, old, kind):
    assert decode(insert(relid, new)) == Insert(relid, new)
    assert decode(update(relid, new, old, kind)) == Update(relid, old, new)
    assert decode(delete(relid, new, kind)) == Delete(relid, new)


@PROPERTY
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(-(2**40), 2**40))
def test_lsns_xids_and_times_round_trip(lsn, end, xid, micros):
    unix = PG_EPOCH_OFFSET_S + micros / 1e6
    b = decode(b"B" + struct.pack("!QqI", lsn, micros, xid))
    assert (b.commit_lsn, b.xid) == (lsn, xid)
    assert b.commit_time == pytest.approx(unix, abs=1e-6)
    c = decode(b"C" + struct.pack("!bQQq", 0, lsn, end, micros))
    assert (c.commit_lsn, c.end_lsn) == (lsn, end)


# --- many row messages at once, column-wise ---------------------------------------------------

texts = st.one_of(st.none(), st.text(max_size=20), st.sampled_from(["", "\x00", "ü✓", "a" * 300, "\\x00ff", "NULL"]))


def decoded_columns(payloads: list[bytes]) -> list[list]:
    rows = [decode(p) for p in payloads]
    rows = [r.old if isinstance(r, Delete) else r.new for r in rows]
    return [list(col) for col in zip(*rows)]


@PROPERTY
@given(st.integers(1, 6).flatmap(lambda n: st.lists(st.lists(texts, min_size=n, max_size=n), min_size=1, max_size=40)),
       st.integers(0, 2**32 - 1), st.sampled_from(["insert", "update", "delete K", "delete O", "mixed"]))
def test_tuple_columns_equal_decoding_each_message(rows, relid, kind):
    build = {
        "insert": lambda r: insert(relid, r), "update": lambda r: update(relid, r),
        "delete K": lambda r: delete(relid, r, b"K"), "delete O": lambda r: delete(relid, r, b"O"),
        "mixed": lambda r: (insert if len(r[0] or "") % 2 else update)(relid, r),
    }[kind]
    payloads = [build(r) for r in rows]
    columns = tuple_columns(payloads, 6)
    assert columns is not None
    assert all(c.type == pa.string() for c in columns)
    assert [c.to_pylist() for c in columns] == decoded_columns(payloads) == [list(c) for c in zip(*rows)]


@PROPERTY
@given(st.lists(st.lists(texts, min_size=3, max_size=3), min_size=2, max_size=10), st.data())
def test_tuple_columns_leave_unlike_messages_to_decode(rows, data):
    """Unchanged TOAST values, unknown kinds, another column count, bad UTF-8 or a truncated
    message: None, so that the stream decodes them one by one (where errors are raised)."""
    payloads = [insert(1, r) for r in rows]
    i = data.draw(st.integers(0, len(rows) - 1))
    spoil = data.draw(st.sampled_from(["unset", "kind", "columns", "utf8", "cut", "extra"]))
    if spoil == "unset":
        payloads[i] = insert(1, [rows[i][0], UNSET, rows[i][2]])
    elif spoil == "kind":
        payloads[i] = b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"b" + struct.pack("!i", 1) + b"\x01"
    elif spoil == "columns":
        payloads[i] = insert(1, rows[i][:2])
    elif spoil == "utf8":
        payloads[i] = insert(1, [rows[i][0], b"\xff\xfe", rows[i][2]])
    elif spoil == "cut":
        payloads[i] = payloads[i][:-1] if payloads[i][-1:] != b"n" else payloads[i][:-3]
    else:
        payloads[i] = payloads[i] + b"t"
    assert tuple_columns(payloads, 6) is None


def test_tuple_columns_of_nothing():
    assert tuple_columns([], 6) is None


# --- protocol 2: streamed in-progress transactions ------------------------------------------------


def in_stream(xid: int, message: bytes) -> bytes:
    """A row, relation or truncate message as sent inside a stream block: the xid after the tag."""
    return message[:1] + struct.pack("!I", xid) + message[1:]


def test_stream_control_messages():
    assert decode(b"S" + struct.pack("!Ib", 771, 1)) == StreamStart(771, True)
    assert decode(b"S" + struct.pack("!Ib", 771, 0)) == StreamStart(771, False)
    assert decode(b"E") == StreamStop()
    msg = decode(b"c" + struct.pack("!IbQQq", 771, 0, 0x100, 0x1A8, pg_time(1_700_000_000.5)))
    assert msg == StreamCommit(771, 0x100, 0x1A8, 1_700_000_000.5)
    assert decode(b"A" + struct.pack("!II", 771, 772)) == StreamAbort(771, 772)


@PROPERTY
@given(st.integers(0, 2**32 - 1), st.lists(st.none() | texts, min_size=1, max_size=5), st.integers(1, 2**32 - 1))
def test_messages_in_a_stream_block_carry_their_subtransaction(xid, values, relid):
    for message in (insert(relid, values), update(relid, values), delete(relid, values, b"O"),
                    relation(relid, "s", "t", [("c", 25, True)]), truncate([relid])):
        assert decode_streamed(in_stream(xid, message)) == (xid, decode(message))
    assert decode_streamed(b"E") == (None, StreamStop())
    payloads = [in_stream(xid, insert(relid, values))] * 3
    assert [c.to_pylist() for c in tuple_columns(payloads, 10)] == [[v] * 3 for v in values]
