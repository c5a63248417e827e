"""MySQL / MariaDB types: how each maps to Arrow (and so to Spark), for the copy and the binlog.

A column's type is kept as `information_schema.COLUMNS.COLUMN_TYPE` spells it (`int(10) unsigned`,
`decimal(12,2)`, `enum('a','b')`, `datetime(6)`). Both paths produce Python values that
`pa.array(values, arrow_type)` converts directly:

- the initial copy selects each column with `copy_expression` (a cast where the driver's own
  value would not convert or would round: TIME as its text, BIT as an unsigned integer, FLOAT
  as a double) in a UTC session;
- the binlog stream (mysql-replication) decodes row images; `stream_converter` fixes the few
  values whose binlog form differs from what a SELECT returns (TIME as timedelta, BIT as a bit
  string, SET as a Python set, BINARY(n) without its zero padding, JSON parsed from MySQL's
  binary format).

Mapping (MySQL -> Arrow -> Spark): tinyint, tinyint unsigned, smallint, year -> int16 (SMALLINT);
smallint unsigned, mediumint (signed or not), int -> int32 (INT); int unsigned, bigint,
bit(1..63) -> int64 (BIGINT); bigint unsigned and bit(64) -> decimal(20,0) (every value fits,
none wraps); decimal(p,s) with p <= 38 -> decimal(p,s); float -> float32; double -> float64;
char, varchar, the text types, json, enum, set -> string (SET as MySQL prints it, 'a,b');
time -> string as MySQL prints it ('-12:34:56.789'); binary, varbinary, the blob types -> binary;
date -> date32; datetime -> timestamp without time zone; timestamp -> timestamp in UTC.
BOOL / BOOLEAN are TINYINT(1) to MySQL and stay integers (the column can hold any tinyint).
Zero dates ('0000-00-00') read as NULL. Spatial types, MariaDB's uuid/inet types and decimals
wider than 38 digits are not supported (TableError naming the column type).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from dataclasses import dataclass

import pyarrow as pa

from htap.connectors.tables import override_type
from htap.errors import TableError

# Binlog column type codes (mysql-replication's FIELD_TYPE; enum and set arrive as their real type).
TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24, DATE, TIME, DATETIME, YEAR, NEWDATE = (
    1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14
)
VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = 15, 16, 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET, BLOB, VAR_STRING, STRING = 245, 246, 247, 248, 252, 253, 254
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB = 249, 250, 251

_TYPE = re.compile(r"^\s*([a-z][a-z0-9 ]*?)\s*(?:\((.*)\))?\s*((?:\b(?:unsigned|signed|zerofill)\b\s*)*)$", re.I | re.S)
_QUOTED = re.compile(r"'((?:[^'\\]|''|\\.)*)'", re.S)

_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "long", "long varchar"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "long varbinary"}
_BLOB_CODES = {BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB}


@dataclass(frozen=True)
class MyType:
    """A parsed COLUMN_TYPE."""

    base: str  # lower case: int, varchar, enum, ...
    args: tuple  # numbers (length, precision, scale, fsp) or, for enum/set, the values
    unsigned: bool
    spelling: str

    @property
    def fsp(self) -> int:
        return int(self.args[0]) if self.args else 0


def parse_type(column_type: str) -> MyType:
    m = _TYPE.match(column_type)
    if not m:
        raise TableError(f"column type {column_type!r} is not supported yet; exclude the table or change the column type")
    base = " ".join(m.group(1).lower().split())
    if base in ("integer",):
        base = "int"
    if base in ("double precision", "real"):
        base = "double"
    if base in ("numeric", "fixed", "dec"):
        base = "decimal"
    if base in ("bool", "boolean"):
        base, raw = "tinyint", "1"
    else:
        raw = m.group(2)
    if base in ("enum", "set"):
        args = tuple(v.replace("''", "'").replace("\\\\", "\\") for v in _QUOTED.findall(raw or ""))
    elif raw:
        args = tuple(int(a) for a in raw.split(",") if a.strip())
    else:
        args = ()
    return MyType(base, args, "unsigned" in (m.group(3) or "").lower(), column_type)


def _unsupported(column_type: str, why: str = "") -> TableError:
    return TableError(f"type {column_type!r} is not supported{why}")


def arrow_type(column_type: str) -> pa.DataType:
    """Arrow type for a MySQL COLUMN_TYPE; TableError if unsupported."""
    t = parse_type(column_type)
    b = t.base
    if b == "tinyint":
        return pa.int16()
    if b == "smallint":
        return pa.int32() if t.unsigned else pa.int16()
    if b == "mediumint":
        return pa.int32()
    if b == "int":
        return pa.int64() if t.unsigned else pa.int32()
    if b == "bigint":
        return pa.decimal128(20, 0) if t.unsigned else pa.int64()
    if b == "decimal":
        precision = t.args[0] if t.args else 10
        scale = t.args[1] if len(t.args) > 1 else 0
        if precision > 38:
            raise _unsupported(column_type, f": Spark's DECIMAL holds 38 digits, this column {precision}")
        return pa.decimal128(precision, scale)
    if b == "float":
        # FLOAT(p) with p > 24 is a DOUBLE; information_schema already spells it `double`.
        return pa.float32()
    if b == "double":
        return pa.float64()
    if b in _TEXT or b in ("enum", "set", "time"):
        return pa.string()
    if b in _BINARY:
        return pa.binary()
    if b == "date":
        return pa.date32()
    if b == "datetime":
        return pa.timestamp("us")
    if b == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if b == "year":
        return pa.int16()
    if b == "bit":
        bits = t.args[0] if t.args else 1
        return pa.decimal128(20, 0) if bits > 63 else pa.int64()
    raise _unsupported(column_type)


def copy_expression(name: str, column_type: str, override: str | None = None) -> str:
    """The SELECT expression for a column in the initial copy (session time zone is UTC)."""
    ident = quote_ident(name)
    b = parse_type(column_type).base
    if override:
        target = override_type(override)
        if pa.types.is_string(target):
            return f"CAST({ident} AS CHAR)"  # a DECIMAL's digits at its scale, as format(Decimal, 'f')
        if pa.types.is_floating(target):
            return f"CAST({ident} AS DOUBLE)"
        return ident
    if b == "time":
        return f"CAST({ident} AS CHAR)"
    if b == "bit":
        return f"CAST({ident} AS UNSIGNED)"
    if b == "float":
        # The text protocol prints FLOAT with 6 digits; as a double it is exact. (`* 1e0`, not
        # `+ 0e0`: -0 + 0 is +0, which would lose a negative zero.)
        return f"({ident} * 1e0)"
    return ident


def override_allowed(column_type: str) -> bool:
    """Columns that can be given another replica type (--column-type): decimals (e.g. wider than
    Spark's 38 digits) as string, double or decimal(p,s)."""
    return parse_type(column_type).base == "decimal"


def override_converter(override: str | None):
    """A function turning one non-NULL binlog value into the override type's value, or None."""
    if not override:
        return None
    target = override_type(override)
    if pa.types.is_string(target):
        return lambda v: format(v, "f") if isinstance(v, decimal.Decimal) else str(v)
    if pa.types.is_floating(target):
        return float
    return None  # decimal(p,s): the Decimal as it is (one that does not fit fails the table)


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def binlog_codes(column_type: str) -> frozenset[int]:
    """The binlog column type codes a column of this type can arrive as."""
    b = parse_type(column_type).base
    codes = {
        "tinyint": {TINY},
        "smallint": {SHORT},
        "mediumint": {INT24},
        "int": {LONG},
        "bigint": {LONGLONG},
        "decimal": {NEWDECIMAL},
        "float": {FLOAT},
        "double": {DOUBLE},
        "date": {DATE, NEWDATE},
        "datetime": {DATETIME, DATETIME2},
        "timestamp": {TIMESTAMP, TIMESTAMP2},
        "time": {TIME, TIME2},
        "year": {YEAR},
        "bit": {BIT},
        "enum": {ENUM},
        "set": {SET},
        "char": {STRING},
        "binary": {STRING},
        "varchar": {VARCHAR, VAR_STRING},
        "varbinary": {VARCHAR, VAR_STRING},
        "json": {JSON} | _BLOB_CODES,  # MySQL's binary JSON; MariaDB's JSON is a LONGTEXT
    }.get(b)
    if codes is None and (b in _TEXT or b in _BINARY):
        codes = _BLOB_CODES
    return frozenset(codes or ())


def is_binary(column_type: str) -> bool:
    return parse_type(column_type).base in _BINARY


def signature(column_type: str) -> tuple:
    """What decoding depends on: two types with the same signature decode the same way.

    Display widths and text lengths do not matter; signedness, scale, fractional seconds,
    BINARY(n)'s padding and enum/set values do."""
    t = parse_type(column_type)
    b = t.base
    if b in ("char", "varchar") or b in _TEXT:
        return ("string",)
    if b in ("varbinary",) or (b in _BINARY and b != "binary"):
        return ("binary",)
    if b in ("tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double", "date", "datetime", "timestamp"):
        return (b, t.unsigned)
    return (b, t.args, t.unsigned)


# --- stream value conversion ------------------------------------------------------------------


def format_time(value: dt.timedelta, fsp: int) -> str:
    """A binlog TIME (a timedelta) as MySQL prints it: [-]HH:MM:SS[.fraction with fsp digits]."""
    us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if us < 0 else ""
    us = abs(us)
    hours, rest = divmod(us, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fsp:
        text += "." + f"{fraction:06d}"[:fsp]
    return text


_EPOCH = dt.datetime(1970, 1, 1)


def stream_converter(column_type: str, binlog_code: int):
    """A function fixing one non-NULL binlog value of this column, or None when none is needed."""
    t = parse_type(column_type)
    b = t.base
    if b == "time":
        fsp = t.fsp
        return lambda v: format_time(v, fsp)
    if b == "bit":
        return lambda v: int(v, 2)
    if b == "set":
        order = {v: i for i, v in enumerate(t.args)}
        return lambda v: ",".join(sorted(v, key=order.__getitem__)) if isinstance(v, (set, frozenset)) else v
    if b == "binary":
        length = t.args[0] if t.args else 1
        return lambda v: v.ljust(length, b"\0")
    if b == "year":
        # YEAR is 1901..2155 or 0000, stored as the offset from 1900: the driver turns 0000 into 1900.
        return lambda v: 0 if v == 1900 else v
    if b == "timestamp":
        # The zero timestamp is stored as 0 seconds, which the driver turns into the epoch.
        return lambda v: None if v == _EPOCH else v
    if binlog_code == JSON:
        return lambda v: json.dumps(_json_text(v), ensure_ascii=False)
    return None


def _json_text(v):
    """mysql-replication returns JSON strings/keys as bytes in some versions: make them text."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {_json_text(k): _json_text(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_text(x) for x in v]
    return v
