"""connectors/mytypes.py: MySQL/MariaDB COLUMN_TYPE parsing, Arrow mapping, copy expressions,
binlog type codes, decode signatures and binlog value conversions."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.connectors import mytypes as m
from htap.errors import TableError


@pytest.mark.parametrize(
    "text,base,args,unsigned",
    [
        ("int(10) unsigned zerofill", "int", (10,), True),
        ("INT UNSIGNED", "int", (), True),
        ("integer", "int", (), False),
        ("bigint signed", "bigint", (), False),
        ("decimal(12,2)", "decimal", (12, 2), False),
        ("numeric(5)", "decimal", (5,), False),
        ("fixed(4,1)", "decimal", (4, 1), False),
        ("double precision", "double", (), False),
        ("real", "double", (), False),
        ("bool", "tinyint", (1,), False),
        ("BOOLEAN", "tinyint", (1,), False),
        ("datetime(6)", "datetime", (6,), False),
        ("long varchar", "long varchar", (), False),
        ("enum('a','b''c','x,y')", "enum", ("a", "b'c", "x,y"), False),
        ("set('read','write')", "set", ("read", "write"), False),
        ("enum('')", "enum", ("",), False),
        ("enum('back\\\\slash')", "enum", ("back\\slash",), False),
    ],
)
def test_parse_type(text, base, args, unsigned):
    t = m.parse_type(text)
    assert (t.base, t.args, t.unsigned, t.spelling) == (base, args, unsigned, text)


def test_fsp():
    assert m.parse_type("time(3)").fsp == 3
    assert m.parse_type("datetime").fsp == 0


@pytest.mark.parametrize(
    "text,arrow",
    [
        ("tinyint(4)", pa.int16()), ("tinyint unsigned", pa.int16()), ("tinyint(1)", pa.int16()), ("bool", pa.int16()),
        ("smallint", pa.int16()), ("smallint unsigned", pa.int32()),
        ("mediumint", pa.int32()), ("mediumint unsigned", pa.int32()),
        ("int(11)", pa.int32()), ("int unsigned", pa.int64()),
        ("bigint(20)", pa.int64()), ("bigint(20) unsigned", pa.decimal128(20, 0)),
        ("decimal(12,2)", pa.decimal128(12, 2)), ("decimal", pa.decimal128(10, 0)), ("decimal(38,10)", pa.decimal128(38, 10)),
        ("float", pa.float32()), ("float(7,3)", pa.float32()), ("double", pa.float64()),
        ("char(3)", pa.string()), ("varchar(255)", pa.string()), ("text", pa.string()), ("longtext", pa.string()),
        ("json", pa.string()), ("enum('a')", pa.string()), ("set('a')", pa.string()), ("time(3)", pa.string()),
        ("binary(4)", pa.binary()), ("varbinary(8)", pa.binary()), ("blob", pa.binary()), ("longblob", pa.binary()),
        ("date", pa.date32()), ("datetime(6)", pa.timestamp("us")), ("timestamp", pa.timestamp("us", tz="UTC")),
        ("year(4)", pa.int16()), ("bit", pa.int64()), ("bit(63)", pa.int64()), ("bit(64)", pa.decimal128(20, 0)),
    ],
)
def test_arrow_type(text, arrow):
    assert m.arrow_type(text) == arrow


@pytest.mark.parametrize("text", ["geometry", "point", "uuid", "inet6", "vector(3)"])
def test_unsupported_types_name_the_type(text):
    with pytest.raises(TableError, match=re.escape(f"type {text!r} is not supported")):
        m.arrow_type(text)


def test_wide_decimals_say_why():
    with pytest.raises(TableError, match="Spark's DECIMAL holds 38 digits, this column 65"):
        m.arrow_type("decimal(65,30)")


def test_a_malformed_type_is_a_table_error():
    with pytest.raises(TableError):
        m.parse_type("int(10")


@pytest.mark.parametrize("width,signed,low,high", [("tinyint", True, -128, 127), ("tinyint", False, 0, 255),
                                                     ("smallint", False, 0, 65535), ("mediumint", False, 0, 2**24 - 1),
                                                     ("int", False, 0, 2**32 - 1), ("bigint", True, -(2**63), 2**63 - 1),
                                                     ("bigint", False, 0, 2**64 - 1)])
def test_every_integer_range_fits_its_arrow_type(width, signed, low, high):
    t = m.arrow_type(width + ("" if signed else " unsigned"))
    assert pa.array([low, high], t).to_pylist() == [low, high]


def test_copy_expressions():
    assert m.copy_expression("t", "time(3)") == "CAST(`t` AS CHAR)"
    assert m.copy_expression("b", "bit(5)") == "CAST(`b` AS UNSIGNED)"
    assert m.copy_expression("f", "float") == "(`f` * 1e0)"  # keeps -0.0 (x + 0 would not)
    assert m.copy_expression("we`ird", "int") == "`we``ird`"


@pytest.mark.parametrize(
    "text,codes",
    [
        ("int", {m.LONG}), ("varchar(3)", {m.VARCHAR, m.VAR_STRING}), ("char(3)", {m.STRING}), ("binary(3)", {m.STRING}),
        ("json", {m.JSON, m.BLOB, m.TINY_BLOB, m.MEDIUM_BLOB, m.LONG_BLOB}), ("text", {m.BLOB, m.TINY_BLOB, m.MEDIUM_BLOB, m.LONG_BLOB}),
        ("datetime(6)", {m.DATETIME, m.DATETIME2}), ("date", {m.DATE, m.NEWDATE}), ("enum('a')", {m.ENUM}),
        ("decimal(5,2)", {m.NEWDECIMAL}), ("geometry", set()),
    ],
)
def test_binlog_codes(text, codes):
    assert m.binlog_codes(text) == frozenset(codes)


def test_is_binary():
    assert m.is_binary("varbinary(3)") and m.is_binary("longblob") and not m.is_binary("varchar(3)")


@pytest.mark.parametrize(
    "a,b,same",
    [
        ("varchar(10)", "varchar(255)", True), ("varchar(10)", "text", True), ("int(10)", "int(11)", True),
        ("int", "int unsigned", False), ("decimal(10,2)", "decimal(10,3)", False), ("datetime(3)", "datetime(6)", True),
        ("time(3)", "time(6)", False), ("binary(4)", "binary(8)", False), ("varbinary(4)", "blob", True),
        ("enum('a','b')", "enum('a','b','c')", False), ("bit(3)", "bit(4)", False),
    ],
)
def test_signature(a, b, same):
    assert (m.signature(a) == m.signature(b)) is same


@pytest.mark.parametrize(
    "delta,fsp,text",
    [
        (dt.timedelta(hours=12, minutes=34, seconds=56), 0, "12:34:56"),
        (-dt.timedelta(hours=12, minutes=34, seconds=56, microseconds=789000), 3, "-12:34:56.789"),
        (dt.timedelta(hours=838, minutes=59, seconds=59), 0, "838:59:59"),
        (-dt.timedelta(microseconds=1), 6, "-00:00:00.000001"),
        (dt.timedelta(seconds=1, microseconds=500000), 1, "00:00:01.5"),
        (dt.timedelta(0), 2, "00:00:00.00"),
    ],
)
def test_format_time(delta, fsp, text):
    assert m.format_time(delta, fsp) == text


MAX_TIME_US = (838 * 3600 + 59 * 60 + 59) * 10**6


def _times_of_precision(fsp: int):
    step = 10 ** (6 - fsp)
    return st.integers(-MAX_TIME_US // step, MAX_TIME_US // step).map(lambda n: (n * step, fsp))


@PROPERTY
@given(st.integers(0, 6).flatmap(_times_of_precision))
def test_format_time_round_trips(us_fsp):
    us, fsp = us_fsp
    text = m.format_time(dt.timedelta(microseconds=us), fsp)
    sign = -1 if text.startswith("-") else 1
    h, mi, s = text.lstrip("-").split(":")
    sec, _, frac = s.partition(".")
    assert len(frac) == fsp
    back = sign * ((int(h) * 3600 + int(mi) * 60 + int(sec)) * 10**6 + int((frac + "000000")[:6]))
    assert back == us


def test_stream_converters():
    assert m.stream_converter("int", m.LONG) is None
    assert m.stream_converter("time(2)", m.TIME2)(dt.timedelta(hours=1, microseconds=123456)) == "01:00:00.12"
    assert m.stream_converter("bit(5)", m.BIT)("10101") == 21
    set_of = m.stream_converter("set('a','b','c')", m.SET)
    assert set_of({"c", "a"}) == "a,c" and set_of("b") == "b" and set_of(set()) == ""
    assert m.stream_converter("binary(4)", m.STRING)(b"ab") == b"ab\x00\x00"
    stamp = m.stream_converter("timestamp", m.TIMESTAMP2)
    assert stamp(dt.datetime(1970, 1, 1)) is None  # the zero timestamp
    assert stamp(dt.datetime(2024, 1, 1)) == dt.datetime(2024, 1, 1)


def test_binlog_json_becomes_text():
    to_text = m.stream_converter("json", m.JSON)
    assert to_text({b"k": [b"v", 1, None, "é"]}) == '{"k": ["v", 1, null, "é"]}'
    assert m.stream_converter("json", m.LONG_BLOB) is None  # MariaDB's JSON is text already
