"""Decoder for Postgres' built-in logical decoding output plugin `pgoutput`, protocol versions 1
and 2 (2 adds the streaming of in-progress transactions: Stream Start / Stop / Commit / Abort,
and an xid after the tag of every message inside a stream block: `decode_streamed`).

Message formats: PostgreSQL docs, "Logical Replication Message Formats". Values arrive in text
format; they are kept as text here and decoded per column later (see pgtypes).

`decode` reads one message into Python values. `tuple_columns` reads the tuple data of many row
messages at once, column-wise into Arrow string arrays with a fixed number of numpy steps per
column (no Python step per value): the stream uses it for runs of row changes of one table
(`htap.connectors.postgres.PostgresStream`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from htap.connectors.changes import UNSET

_I16 = struct.Struct("!h").unpack_from
_I32 = struct.Struct("!i").unpack_from

PG_EPOCH_OFFSET_S = 946_684_800  # 2000-01-01 in Unix seconds


@dataclass(frozen=True)
class Begin:
    commit_lsn: int
    commit_time: float  # Unix seconds
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time: float


@dataclass(frozen=True)
class Relation:
    relid: int
    schema: str
    name: str
    columns: tuple[str, ...]
    type_oids: tuple[int, ...]


@dataclass(frozen=True)
class Insert:
    relid: int
    new: list


@dataclass(frozen=True)
class Update:
    relid: int
    old: list | None  # the old key ('K') or old row ('O') when the key changed or identity is FULL
    new: list


@dataclass(frozen=True)
class Delete:
    relid: int
    old: list


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]


@dataclass(frozen=True)
class StreamStart:
    """The messages up to the next StreamStop belong to in-progress transaction `xid`."""

    xid: int
    first_segment: bool


@dataclass(frozen=True)
class StreamStop:
    pass


@dataclass(frozen=True)
class StreamCommit:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_time: float


@dataclass(frozen=True)
class StreamAbort:
    """Subtransaction `subxid` of streamed transaction `xid` rolled back (`subxid == xid`: all of it)."""

    xid: int
    subxid: int


@dataclass(frozen=True)
class Ignored:
    kind: str


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\x00", pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[list, int]:
    (n,) = _I16(buf, pos)
    pos += 2
    values: list = []
    append = values.append
    for _ in range(n):
        kind = buf[pos]
        pos += 1
        if kind == 0x74:  # 't' text
            (length,) = _I32(buf, pos)
            pos += 4
            end = pos + length
            append(buf[pos:end].decode())
            pos = end
        elif kind == 0x6E:  # 'n' null
            append(None)
        elif kind == 0x75:  # 'u' unchanged TOAST value
            append(UNSET)
        else:
            raise ValueError(f"unknown pgoutput tuple value kind {chr(kind)!r}")
    return values, pos


def decode(buf: bytes):
    """One pgoutput message -> one of the dataclasses above."""
    tag = buf[0:1]
    if tag == b"B":
        lsn, ts, xid = struct.unpack_from("!QqI", buf, 1)
        return Begin(lsn, ts / 1e6 + PG_EPOCH_OFFSET_S, xid)
    if tag == b"C":
        _flags, lsn, end_lsn, ts = struct.unpack_from("!bQQq", buf, 1)
        return Commit(lsn, end_lsn, ts / 1e6 + PG_EPOCH_OFFSET_S)
    if tag == b"I":
        (relid,) = struct.unpack_from("!I", buf, 1)
        new, _ = _tuple(buf, 6)  # skip 'N'
        return Insert(relid, new)
    if tag == b"U":
        (relid,) = struct.unpack_from("!I", buf, 1)
        pos, old = 5, None
        if buf[pos : pos + 1] in (b"K", b"O"):
            old, pos = _tuple(buf, pos + 1)
        new, _ = _tuple(buf, pos + 1)  # skip 'N'
        return Update(relid, old, new)
    if tag == b"D":
        (relid,) = struct.unpack_from("!I", buf, 1)
        old, _ = _tuple(buf, 6)  # skip 'K' / 'O'
        return Delete(relid, old)
    if tag == b"R":
        (relid,) = struct.unpack_from("!I", buf, 1)
        schema, pos = _string(buf, 5)
        name, pos = _string(buf, pos)
        pos += 1  # replica identity setting
        (ncols,) = struct.unpack_from("!h", buf, pos)
        pos += 2
        columns, oids = [], []
        for _ in range(ncols):
            pos += 1  # flags (1 = part of the key)
            col, pos = _string(buf, pos)
            oid, _typmod = struct.unpack_from("!Ii", buf, pos)
            pos += 8
            columns.append(col)
            oids.append(oid)
        return Relation(relid, schema, name, tuple(columns), tuple(oids))
    if tag == b"T":
        (n,) = struct.unpack_from("!I", buf, 1)
        relids = struct.unpack_from(f"!{n}I", buf, 6)  # after the options byte
        return Truncate(tuple(relids))
    if tag == b"S":
        xid, first = struct.unpack_from("!Ib", buf, 1)
        return StreamStart(xid, first == 1)
    if tag == b"E":
        return StreamStop()
    if tag == b"c":
        xid, _flags, lsn, end_lsn, ts = struct.unpack_from("!IbQQq", buf, 1)
        return StreamCommit(xid, lsn, end_lsn, ts / 1e6 + PG_EPOCH_OFFSET_S)
    if tag == b"A":
        xid, subxid = struct.unpack_from("!II", buf, 1)  # (v4 adds the abort's LSN and time after)
        return StreamAbort(xid, subxid)
    return Ignored(tag.decode(errors="replace"))


# Messages that carry the (sub)transaction's xid right after their tag inside a stream block.
STREAMED_TAGS = frozenset(b"IUDRTYM")


def decode_streamed(buf: bytes):
    """A message inside a stream block -> (the xid of its (sub)transaction, `decode` of it
    without that xid). Stream control messages carry none: (None, the message)."""
    if buf[0] in STREAMED_TAGS:
        (xid,) = struct.unpack_from("!I", buf, 1)
        return xid, decode(buf[:1] + buf[5:])
    return None, decode(buf)


def tuple_columns(payloads: list[bytes], offset: int) -> list[pa.Array] | None:
    """The tuple data that starts at `offset` and ends each of `payloads` (Insert, Update without
    an old tuple, Delete), column-wise: one Arrow string array per column, NULL where the value
    is 'n' — exactly the values `decode` gives, with a fixed number of vectorized steps per
    column instead of Python steps per value.

    None when the messages are not all alike enough for that: different numbers of columns, an
    unchanged TOAST value ('u'), an unknown value kind, malformed lengths or text that is not
    UTF-8. The caller then decodes them one by one with `decode` (which raises for what is
    really wrong)."""
    n = len(payloads)
    if n == 0:
        return None
    sizes = np.fromiter(map(len, payloads), dtype=np.int64, count=n)
    ends = np.cumsum(sizes)
    pos = ends - sizes + offset
    if (pos + 2 > ends).any() or ends[-1] >= 1 << 31:
        return None
    # 16 bytes of padding: a 16-byte window is read at each value (below).
    joined = b"".join(payloads) + bytes(16)
    buf = np.frombuffer(joined, dtype=np.uint8)
    ncols = (buf[pos].astype(np.int64) << 8) | buf[pos + 1]
    if (ncols != ncols[0]).any() or ncols[0] >= 0x8000:
        return None
    pos = pos + 2
    spans = []  # per column: (value kind positions, value lengths, text mask)
    for _ in range(int(ncols[0])):
        if (pos >= ends).any():
            return None
        kind = buf[pos]
        text = kind == 0x74
        if not (text | (kind == 0x6E)).all():
            return None  # 'u' (unchanged TOAST) or an unknown kind: decoded one by one
        length = (
            (buf[pos + 1].astype(np.int64) << 24) | (buf[pos + 2].astype(np.int64) << 16)
            | (buf[pos + 3].astype(np.int64) << 8) | buf[pos + 4]
        )
        length = np.where(text, length, 0)
        if (length >= 1 << 31).any():  # a negative int32
            return None
        spans.append((pos, length, text))
        pos = pos + 1 + np.where(text, 4 + length, 0)
    if (pos != ends).any():
        return None
    # Each column becomes an Arrow string_view array over the joined messages (no copy of the
    # values: a 16-byte view per value, as Arrow lays them out), then one C++ cast compacts it.
    windows = np.lib.stride_tricks.sliding_window_view(buf, 16)
    beyond = np.arange(12)
    data = pa.py_buffer(joined)
    columns = []
    for kinds, length, text in spans:
        # A value's window from its length field: 4 bytes of length, then its first 12 bytes.
        views = windows[kinds + 1]
        views[:, 0:4] = length.astype("<i4").view(np.uint8).reshape(n, 4)
        views[:, 4:][beyond >= length[:, None]] = 0  # inline values (up to 12 bytes) end in zeros
        long = length > 12
        if long.any():  # length, 4-byte prefix, buffer 0, offset of the value
            views[long, 8:12] = 0
            views[long, 12:16] = (kinds[long] + 5).astype("<i4").view(np.uint8).reshape(-1, 4)
        nulls = n - int(np.count_nonzero(text))
        validity = pa.py_buffer(np.packbits(text, bitorder="little")) if nulls else None
        array = pa.Array.from_buffers(pa.string_view(), n, [validity, pa.py_buffer(views), data], nulls)
        try:
            array = array.cast(pa.string())
            array.validate(full=True)  # UTF-8, as decode's bytes.decode() checks
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        columns.append(array)
    return columns
