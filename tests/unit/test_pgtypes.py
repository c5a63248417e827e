"""connectors/pgtypes.py: Postgres type -> Arrow type, and vectorized decoding of Postgres' text
format (as sessions with TimeZone=UTC, DateStyle=ISO, extra_float_digits=3 print it)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import HEAVY_PROPERTY, PROPERTY, UTC

from htap.connectors.pgtypes import arrow_type, decode_text_column
from htap.errors import TableError


@pytest.mark.parametrize(
    "pg,arrow",
    [
        ("smallint", pa.int16()),
        ("integer", pa.int32()),
        ("bigint", pa.int64()),
        ("real", pa.float32()),
        ("double precision", pa.float64()),
        ("boolean", pa.bool_()),
        ("text", pa.string()),
        ("character varying(20)", pa.string()),
        ("character varying", pa.string()),
        ("character(3)", pa.string()),
        ("varchar(5)", pa.string()),
        ("bpchar", pa.string()),
        ("uuid", pa.string()),
        ("json", pa.string()),
        ("jsonb", pa.string()),
        ("inet", pa.string()),
        ("interval", pa.string()),
        ("name", pa.string()),
        ("time without time zone", pa.string()),
        ("time(3) without time zone", pa.string()),
        ("bytea", pa.binary()),
        ("date", pa.date32()),
        ("timestamp without time zone", pa.timestamp("us")),
        ("timestamp(3) without time zone", pa.timestamp("us")),
        ("timestamp with time zone", pa.timestamp("us", tz="UTC")),
        ("timestamp(0) with time zone", pa.timestamp("us", tz="UTC")),
        ("numeric(12,2)", pa.decimal128(12, 2)),
        ("numeric(38,0)", pa.decimal128(38, 0)),
        ("  Numeric( 10 , 3 ) ", pa.decimal128(10, 3)),
        ("INTEGER", pa.int32()),
        ("integer[]", pa.list_(pa.int32())),
        ("text[]", pa.list_(pa.string())),
        ("numeric(5,2)[]", pa.list_(pa.decimal128(5, 2))),
        ("boolean[]", pa.list_(pa.bool_())),
        ("double precision[]", pa.list_(pa.float64())),
        ("bytea[]", pa.list_(pa.binary())),
        ("date[]", pa.list_(pa.date32())),
        ("timestamp without time zone[]", pa.list_(pa.timestamp("us"))),
        ("time with time zone", pa.string()),
        ("bit(3)", pa.string()),
        ("xml", pa.string()),
        ("cidr", pa.string()),
    ],
)
def test_arrow_type(pg, arrow):
    assert arrow_type(pg) == arrow


@pytest.mark.parametrize(
    "pg",
    ["point", "money", "tsvector", "mood", "numeric", "numeric(50,10)", "numeric[]", "point[]"],
)
def test_types_without_a_replica_type_name_the_type(pg):
    with pytest.raises(TableError, match=re.escape(f"type {pg!r} is not supported")):
        arrow_type(pg)


def decode(values, target):
    return decode_text_column(pa.array(values, pa.string()), target).to_pylist()


def test_integers():
    assert decode(["0", "-32768", "32767", None], pa.int16()) == [0, -32768, 32767, None]
    assert decode(["-9223372036854775808", "9223372036854775807"], pa.int64()) == [-(2**63), 2**63 - 1]


def test_an_integer_out_of_range_fails_loudly():
    with pytest.raises(pa.ArrowInvalid):
        decode(["32768"], pa.int16())


def test_doubles_including_signed_zero_nan_and_infinities():
    got = decode(["-0", "0", "NaN", "Infinity", "-Infinity", "1.5e-300", "3.141592653589793", "1e+308", None], pa.float64())
    assert repr(got[0]) == "-0.0" and repr(got[1]) == "0.0"
    assert math.isnan(got[2])
    assert got[3:] == [math.inf, -math.inf, 1.5e-300, 3.141592653589793, 1e308, None]


def test_reals_are_exact_with_extra_float_digits():
    got = decode(["0.1", "-0", "NaN", "-Infinity", "3.4028235e+38"], pa.float32())
    assert got[0] == pa.scalar(0.1, pa.float32()).as_py()
    assert repr(got[1]) == "-0.0" and math.isnan(got[2]) and got[3] == -math.inf
    assert got[4] == pa.scalar(3.4028235e38, pa.float32()).as_py()


def test_booleans():
    assert decode(["t", "f", None], pa.bool_()) == [True, False, None]


def test_bytea_hex():
    assert decode(["\\x", "\\x00ff41", "\\xDEADbeef", None], pa.binary()) == [b"", b"\x00\xffA", b"\xde\xad\xbe\xef", None]
    assert decode_text_column(pa.array(["\\x00"]), pa.binary()).type == pa.binary()


def test_text_passes_through_untouched():
    values = pa.array(["a", None, "", "\\x00"], pa.string())
    assert decode_text_column(values, pa.string()) is values


def test_dates():
    assert decode(["2024-02-29", "0001-01-01", "1969-12-31", None], pa.date32()) == [
        dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(1969, 12, 31), None
    ]


def test_timestamps():
    assert decode(["2024-02-29 12:34:56.123456", "2024-02-29 12:34:56", "1969-12-31 23:59:59.999999", None], pa.timestamp("us")) == [
        dt.datetime(2024, 2, 29, 12, 34, 56, 123456), dt.datetime(2024, 2, 29, 12, 34, 56),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999), None,
    ]


def test_timestamptz_in_utc_and_with_other_offsets():
    got = decode(["2024-02-29 12:34:56.5+00", "2024-02-29 12:34:56+05:30", "2024-01-01 00:00:00-08", None], pa.timestamp("us", tz="UTC"))
    assert got[:3] == [
        dt.datetime(2024, 2, 29, 12, 34, 56, 500000, tzinfo=UTC),
        dt.datetime(2024, 2, 29, 7, 4, 56, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 8, tzinfo=UTC),
    ]
    assert got[3] is None


def test_numeric():
    D = decimal.Decimal
    assert decode(["12.50", "-0.01", "0", "99999999.99", None], pa.decimal128(10, 2)) == [D("12.50"), D("-0.01"), D("0.00"), D("99999999.99"), None]
    assert decode(["12.5"], pa.decimal128(10, 2)) == [D("12.50")]
    assert decode(["123456789012345678.123456789012345678"], pa.decimal128(38, 18)) == [D("123456789012345678.123456789012345678")]
    assert decode(["NaN", "1"], pa.decimal128(10, 2)) == [None, D("1.00")]  # Spark's DECIMAL has no NaN: NULL


def test_numeric_that_would_lose_digits_fails_loudly():
    with pytest.raises(pa.ArrowInvalid):
        decode(["1.234"], pa.decimal128(10, 2))


def test_one_dimensional_arrays():
    assert decode(["{1,2,NULL}", "{}", None, "{-5}"], pa.list_(pa.int32())) == [[1, 2, None], [], None, [-5]]
    assert decode(['{a,"b c",NULL,"NULL","","x,y","q\\"t","back\\\\slash"}'], pa.list_(pa.string())) == [
        ["a", "b c", None, "NULL", "", "x,y", 'q"t', "back\\slash"]
    ]
    assert decode(["{t,f,NULL}"], pa.list_(pa.bool_())) == [[True, False, None]]
    got = decode(["{1.5,NaN,-Infinity,-0}"], pa.list_(pa.float64()))[0]
    assert got[0] == 1.5 and math.isnan(got[1]) and got[2] == -math.inf and repr(got[3]) == "-0.0"
    assert decode(["{1.50,2}"], pa.list_(pa.decimal128(5, 2))) == [[decimal.Decimal("1.50"), decimal.Decimal("2.00")]]


def test_multi_dimensional_arrays_are_refused():
    with pytest.raises(TableError, match="multi-dimensional array"):
        decode(["{1}", "{{1,2},{3,4}}"], pa.list_(pa.int32()))


def test_array_bounds_are_dropped_and_elements_get_their_fates():
    assert decode(["[0:2]={7,8,9}"], pa.list_(pa.int32())) == [[7, 8, 9]]
    days = decode_text_column(pa.array(['{infinity,-infinity,"0044-03-15 BC"}']), pa.list_(pa.date32()))
    assert days.cast(pa.list_(pa.int32())).to_pylist() == [[2932896, -719162, -735160]]


def test_infinite_bc_and_far_future_dates_and_timestamps():
    days = decode_text_column(pa.array(["infinity", "-infinity", "0044-03-15 BC", "10000-01-01", None]), pa.date32())
    assert days.cast(pa.int32()).to_pylist() == [2932896, -719162, -735160, 2932897, None]
    micros = decode_text_column(pa.array(["infinity", "-infinity", "0001-01-01 00:00:00 BC", None]), pa.timestamp("us"))
    assert micros.cast(pa.int64()).to_pylist() == [253402300799999999, -62135596800000000, -62167219200000000, None]
    with pytest.raises(ValueError, match="294247-01-10"):
        decode_text_column(pa.array(["294277-01-01 00:00:00"]), pa.timestamp("us"))


@PROPERTY
@given(st.lists(st.one_of(st.none(), st.floats(width=64)), max_size=20))
def test_doubles_printed_by_postgres_decode_to_the_same_value(values):
    def pg_text(f):  # Postgres float8out with extra_float_digits=3: shortest exact text
        if f is None:
            return None
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return repr(f)

    got = decode([pg_text(v) for v in values], pa.float64())
    assert [repr(g) for g in got] == [repr(v) for v in values]


@HEAVY_PROPERTY
@given(st.lists(st.one_of(st.none(), st.binary(max_size=16)), max_size=10))
def test_bytea_round_trip(values):
    text = [None if v is None else "\\x" + v.hex() for v in values]
    assert decode(text, pa.binary()) == values


@HEAVY_PROPERTY
@given(st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=6)), max_size=8))
def test_int_arrays_round_trip(arrays):
    text = [None if a is None else "{" + ",".join("NULL" if v is None else str(v) for v in a) + "}" for a in arrays]
    assert decode(text, pa.list_(pa.int32())) == arrays
