"""Decoder for Postgres' built-in logical decoding output plugin `pgoutput`, protocol version 1.

Message formats: PostgreSQL docs, "Logical Replication Message Formats". Values arrive in text
format; they are kept as text here and decoded per column later (see pgtypes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from htap.connectors.changes import UNSET

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
class Ignored:
    kind: str


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\x00", pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[list, int]:
    (n,) = struct.unpack_from("!h", buf, pos)
    pos += 2
    values: list = []
    append = values.append
    for _ in range(n):
        kind = buf[pos]
        pos += 1
        if kind == 0x74:  # 't' text
            (length,) = struct.unpack_from("!i", buf, pos)
            pos += 4
            append(buf[pos : pos + length].decode())
            pos += length
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
    return Ignored(tag.decode(errors="replace"))
