"""Commit sequences: every source's commit order as one int64 (`seq`), and its own notation.

- Postgres: the commit LSN. An LSN `X/Y` (hex) is `(X << 32) | Y`.
- MySQL/MariaDB: `(binlog file index << 32) | position`, the index being `mysql-bin.000042`'s 42.
  Positions within a file are below 2**32, so the int orders like (file, position).
- Debezium: the seq of the origin (one of the two above).

The one place these codecs live; connectors, readers, status and the verifier use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from htap.errors import ConfigError, SourceError

_LOW32 = 0xFFFFFFFF


def lsn_to_int(lsn: str) -> int:
    """'16/B374D848' -> int."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(n: int) -> str:
    """int -> '16/B374D848'."""
    return f"{n >> 32:X}/{n & _LOW32:X}"


def binlog_file_index(log_file: str) -> int:
    """mysql-bin.000042 -> 42."""
    try:
        return int(str(log_file).rsplit(".", 1)[1])
    except (IndexError, ValueError):
        raise SourceError(f"binlog file name {log_file!r} has no numeric extension; cannot order positions") from None


def binlog_seq(log_file: str, pos: int) -> int:
    """(binlog file name, position) -> seq."""
    return (binlog_file_index(log_file) << 32) | int(pos)


def binlog_parts(seq: int) -> tuple[int, int]:
    """seq -> (binlog file index, position)."""
    return seq >> 32, seq & _LOW32


def format_binlog(seq: int) -> str:
    idx, pos = binlog_parts(seq)
    return f"binlog file #{idx} position {pos}"


@dataclass(frozen=True)
class SeqCodec:
    """How one kind of source spells its positions: `format` for people, `parse` for what they type.

    Which codec a source uses is its config's business (`SourceConfig.codec`), so nothing here
    branches on a source kind."""

    name: str
    _format: Callable[[int], str]
    _parse: Callable[[str], int]
    example: str

    def format(self, seq: int | None) -> str | None:
        return None if seq is None else self._format(seq)

    def parse(self, text: str) -> int:
        text = text.strip().strip("'")
        try:
            return int(text) if re.fullmatch(r"-?\d+", text) else self._parse(text)
        except (ValueError, IndexError, SourceError) as e:
            raise ConfigError(f"position {text!r}: give a seq (an integer) or {self.example}") from e


def parse_binlog(text: str) -> int:
    """'binlog file #42 position 4' or 'mysql-bin.000042:4' -> seq."""
    m = re.fullmatch(r"binlog file #(\d+) position (\d+)", text)
    if m:
        return (int(m.group(1)) << 32) | int(m.group(2))
    name, _, pos = text.rpartition(":")
    if not name:
        raise ValueError(text)
    return binlog_seq(name, int(pos))


def _no_notation(text: str) -> int:
    raise ValueError(text)


LSN = SeqCodec("lsn", int_to_lsn, lsn_to_int, "a Postgres LSN like 0/16B3748")
BINLOG = SeqCodec("binlog", format_binlog, parse_binlog, "a binlog position like mysql-bin.000042:4")
PLAIN = SeqCodec("seq", str, _no_notation, "nothing else")


def format_seq(codec: SeqCodec, seq: int | None) -> str | None:
    """A seq the way its source spells positions (Postgres LSN, MySQL binlog file and position)."""
    return codec.format(seq)


def parse_seq(text: str) -> int:
    """A seq a user typed (`VERSION AS OF`, CLI): an integer, or a Postgres LSN such as 0/16B3748."""
    text = text.strip().strip("'")
    try:
        return lsn_to_int(text) if "/" in text else int(text)
    except ValueError as e:
        raise ConfigError(f"VERSION AS OF {text!r}: give a seq (an integer) or a Postgres LSN like 0/16B3748") from e
