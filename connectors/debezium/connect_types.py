"""Kafka Connect column types (`<type>[ <logical name>][(p,s)]`): the replica's Arrow type and value decoding."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from typing import Any, Callable

import pyarrow as pa

from htap.connectors.changes import (
    UNSET,
)
from htap.errors import TableError

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
UNBOUNDED_DECIMAL = pa.decimal128(38, 18)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_TYPE = re.compile(r"^(\w+)(?: ([\w.]+))?(?:\((\d+),(-?\d+)\))?$")


def type_string(field_schema: dict) -> str:
    """A Kafka Connect field schema as the source type kept for the column."""
    t = field_schema.get("type", "")
    name = field_schema.get("name")
    text = t + (f" {name}" if name else "")
    if name == DECIMAL:
        params = field_schema.get("parameters") or {}
        precision = params.get("connect.decimal.precision")
        text += f"({int(precision) if precision is not None else 38},{int(params.get('scale', 0))})"
    return text


def _parse(source_type: str) -> tuple[str, str | None, int | None, int | None]:
    m = _TYPE.match(source_type.strip())
    if not m:
        raise TableError(f"column type {source_type!r} is not a Kafka Connect type this replica knows")
    p, s = m.group(3), m.group(4)
    return m.group(1), m.group(2), (int(p) if p else None), (int(s) if s else None)


_NAMED: dict[str, pa.DataType] = {
    "io.debezium.time.Date": pa.date32(),
    "org.apache.kafka.connect.data.Date": pa.date32(),
    "io.debezium.time.Time": pa.string(),
    "io.debezium.time.MicroTime": pa.string(),
    "io.debezium.time.NanoTime": pa.string(),
    "org.apache.kafka.connect.data.Time": pa.string(),
    "io.debezium.time.Timestamp": pa.timestamp("us"),
    "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
    "io.debezium.time.NanoTimestamp": pa.timestamp("us"),
    "org.apache.kafka.connect.data.Timestamp": pa.timestamp("us"),
    "io.debezium.time.ZonedTimestamp": pa.timestamp("us", tz="UTC"),
    VARIABLE_DECIMAL: UNBOUNDED_DECIMAL,
}
_PLAIN: dict[str, pa.DataType] = {
    "int8": pa.int16(),  # Spark's smallest integer the replica maps is SMALLINT
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def arrow_type(source_type: str) -> pa.DataType:
    """Arrow type of a column kept as a Kafka Connect type string."""
    t, name, precision, scale = _parse(source_type)
    if name == DECIMAL:
        if precision is not None and precision > 38:
            return UNBOUNDED_DECIMAL
        return pa.decimal128(precision or 38, scale or 0)
    if name in _NAMED:
        return _NAMED[name]
    if t in _PLAIN:
        return _PLAIN[t]
    raise TableError(
        f"column type {source_type!r} (Kafka Connect) is not supported yet; exclude the table or the column"
    )


def _format_time(us: int) -> str:
    seconds, fraction = divmod(int(us), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    if fraction:
        text += f".{fraction:06d}".rstrip("0")
    return text


def _decimal_from_bytes(v, scale: int) -> decimal.Decimal:
    raw = base64.b64decode(v) if isinstance(v, str) else bytes(v)
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def decoder(source_type: str, placeholder: str) -> Callable[[Any], Any]:
    """A function turning one JSON value of this column into the Python value Arrow converts
    (UNSET for the unavailable-value placeholder)."""
    t, name, _precision, scale = _parse(source_type)
    target = arrow_type(source_type)
    placeholders = {placeholder, base64.b64encode(placeholder.encode()).decode()}

    def wrap(f):
        def decode(v):
            if v is None:
                return None
            if isinstance(v, str) and v in placeholders:
                return UNSET
            return f(v)

        return decode

    if name == DECIMAL:
        s = scale or 0
        return wrap(lambda v: decimal.Decimal(str(v)) if isinstance(v, (int, float)) else _decimal_from_bytes(v, s))
    if name == VARIABLE_DECIMAL:
        q = decimal.Decimal(1).scaleb(-18)
        return wrap(lambda v: _decimal_from_bytes(v["value"], int(v["scale"])).quantize(q))
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return wrap(lambda v: _EPOCH_DATE + dt.timedelta(days=int(v)))
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return wrap(lambda v: _format_time(int(v) * 1000))
    if name == "io.debezium.time.MicroTime":
        return wrap(lambda v: _format_time(int(v)))
    if name == "io.debezium.time.NanoTime":
        return wrap(lambda v: _format_time(int(v) // 1000))
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return wrap(lambda v: _EPOCH + dt.timedelta(milliseconds=int(v)))
    if name == "io.debezium.time.MicroTimestamp":
        return wrap(lambda v: _EPOCH + dt.timedelta(microseconds=int(v)))
    if name == "io.debezium.time.NanoTimestamp":
        return wrap(lambda v: _EPOCH + dt.timedelta(microseconds=int(v) // 1000))
    if name == "io.debezium.time.ZonedTimestamp":
        return wrap(lambda v: dt.datetime.fromisoformat(v).astimezone(dt.timezone.utc))
    if pa.types.is_binary(target):
        return wrap(lambda v: base64.b64decode(v) if isinstance(v, str) else bytes(v))
    if pa.types.is_floating(target):
        return wrap(float)  # also "NaN" / "Infinity"
    if pa.types.is_integer(target):
        return wrap(int)
    if pa.types.is_boolean(target):
        return wrap(bool)
    return wrap(lambda v: v if isinstance(v, str) else json.dumps(v))
