"""htap.seq (core/seq.py): Postgres LSN and MySQL binlog codecs, parse_seq, format_seq."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.errors import ConfigError, SourceError
from htap.seq import (
    BINLOG,
    LSN,
    PLAIN,
    binlog_file_index,
    binlog_parts,
    binlog_seq,
    format_binlog,
    format_seq,
    int_to_lsn,
    lsn_to_int,
    parse_seq,
)

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(0, 2**63 - 1)


@pytest.mark.parametrize(
    "text,value",
    [("0/0", 0), ("0/16B3748", 0x16B3748), ("16/B374D848", (0x16 << 32) | 0xB374D848), ("1/0", 2**32), ("FFFFFFFF/FFFFFFFF", 2**64 - 1)],
)
def test_lsn_codec(text, value):
    assert lsn_to_int(text) == value
    assert int_to_lsn(value) == text


def test_lsn_parsing_accepts_lower_case_and_leading_zeros():
    assert lsn_to_int("16/b374d848") == lsn_to_int("016/0B374D848")


@PROPERTY
@given(U64)
def test_lsn_round_trip(n):
    assert lsn_to_int(int_to_lsn(n)) == n


@PROPERTY
@given(U64, U64)
def test_lsn_order_is_integer_order(a, b):
    ha, la = (int(p, 16) for p in int_to_lsn(a).split("/"))
    hb, lb = (int(p, 16) for p in int_to_lsn(b).split("/"))
    assert ((ha, la) < (hb, lb)) == (a < b)


@pytest.mark.parametrize("name,index", [("mysql-bin.000042", 42), ("binlog.1", 1), ("a.b.000007", 7), ("mariadb-bin.999999", 999999)])
def test_binlog_file_index(name, index):
    assert binlog_file_index(name) == index


@pytest.mark.parametrize("name", ["mysql-bin", "mysql-bin.index", "", "x."])
def test_binlog_file_without_a_numeric_extension(name):
    with pytest.raises(SourceError, match="has no numeric extension; cannot order positions"):
        binlog_file_index(name)


def test_binlog_seq():
    assert binlog_seq("mysql-bin.000003", 1234) == (3 << 32) | 1234
    assert binlog_parts((3 << 32) | 1234) == (3, 1234)
    assert format_binlog((3 << 32) | 1234) == "binlog file #3 position 1234"
    assert binlog_seq("mysql-bin.000003", "4") == (3 << 32) | 4


@PROPERTY
@given(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1))
def test_binlog_seqs_order_like_file_then_position(f1, p1, f2, p2):
    a, b = binlog_seq(f"mysql-bin.{f1:06d}", p1), binlog_seq(f"mysql-bin.{f2:06d}", p2)
    assert binlog_parts(a) == (f1, p1)
    assert (a < b) == ((f1, p1) < (f2, p2))
    assert 0 <= a < 2**63  # fits the int64 seq


@pytest.mark.parametrize(
    "codec,seq,text",
    [
        (LSN, (0x16 << 32) | 0xB374D848, "16/B374D848"),
        (BINLOG, (42 << 32) | 4, "binlog file #42 position 4"),
        (PLAIN, 12345, "12345"),
        (LSN, None, None),
        (BINLOG, None, None),
    ],
)
def test_format_seq(codec, seq, text):
    assert format_seq(codec, seq) == text


@PROPERTY
@given(I64)
def test_every_codec_parses_what_it_formats(n):
    for codec in (LSN, BINLOG, PLAIN):
        assert codec.parse(codec.format(n)) == n
        assert codec.parse(str(n)) == n


def test_binlog_codec_reads_file_and_position():
    assert BINLOG.parse("mysql-bin.000042:4") == (42 << 32) | 4


@pytest.mark.parametrize("codec,text", [(LSN, "0/xyz"), (BINLOG, "mysql-bin:4"), (BINLOG, "42"[:0] + "x"), (PLAIN, "0/1")])
def test_codec_errors_say_what_to_give(codec, text):
    with pytest.raises(ConfigError, match=f"give a seq \\(an integer\\) or {codec.example}"):
        codec.parse(text)


@pytest.mark.parametrize(
    "text,seq",
    [("24116032", 24116032), (" 7 ", 7), ("'0/16FFA40'", 0x16FFA40), ("0/16FFA40", 0x16FFA40), ("1/0", 2**32), ("-1", -1)],
)
def test_parse_seq(text, seq):
    assert parse_seq(text) == seq


@pytest.mark.parametrize("text", ["", "abc", "0/xyz", "1.5", "0x10"])
def test_parse_seq_errors_say_what_to_give(text):
    with pytest.raises(ConfigError, match="give a seq \\(an integer\\) or a Postgres LSN like 0/16B3748"):
        parse_seq(text)


@PROPERTY
@given(I64)
def test_parse_seq_reads_both_spellings(n):
    assert parse_seq(str(n)) == n
    assert parse_seq(int_to_lsn(n)) == n
    assert parse_seq(format_seq(LSN, n)) == n
