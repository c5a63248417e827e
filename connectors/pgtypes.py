"""Postgres types: how each maps to Arrow (and so to Spark), and vectorized text decoding.

Both the initial copy (COPY ... TEXT) and the pgoutput stream deliver values in Postgres' text
format. Changes are buffered as columns of text and decoded here, one Arrow cast per column per
checkpoint, so the hot path never converts values one by one in Python.
Sessions that produce text use TimeZone=UTC, DateStyle=ISO and extra_float_digits=3 (see
`SESSION_SETTINGS`), which makes the formats below exact.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from htap import engine
from htap.errors import TableError

SESSION_SETTINGS = "-c TimeZone=UTC -c DateStyle=ISO -c extra_float_digits=3 -c IntervalStyle=iso_8601"

# numeric without a declared precision has no Spark equivalent; we keep 38 digits, 18 after the point.
UNBOUNDED_NUMERIC = pa.decimal128(38, 18)

_SIMPLE: dict[str, pa.DataType] = {
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "boolean": pa.bool_(),
    "text": pa.string(),
    "date": pa.date32(),
    "timestamp without time zone": pa.timestamp("us"),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "time without time zone": pa.string(),  # Spark has no TIME type; kept as ISO text
    "uuid": pa.string(),
    "json": pa.string(),
    "jsonb": pa.string(),
    "bytea": pa.binary(),
    "name": pa.string(),
    "inet": pa.string(),
    "interval": pa.string(),
}
_STRINGLIKE = re.compile(r"^(character varying|character|varchar|char|bpchar)(\(\d+\))?$")
_NUMERIC = re.compile(r"^numeric(?:\((\d+),(\d+)\))?$")
_TIMESTAMP_P = re.compile(r"^(timestamp|time)\(\d\) (with|without) time zone$")


def arrow_type(pg_type: str) -> pa.DataType:
    """Arrow type for a Postgres type as `format_type()` spells it; TableError if unsupported.

    One-dimensional arrays of the scalar types map to Arrow lists (Spark ARRAY)."""
    t = pg_type.strip().lower()
    if t.endswith("[]"):
        element = arrow_type(t[:-2])
        if pa.types.is_binary(element) or pa.types.is_timestamp(element) or pa.types.is_date(element):
            raise TableError(f"column type {pg_type!r} is not supported yet; exclude the table or change the column type")
        return pa.list_(element)
    t = _TIMESTAMP_P.sub(r"\1 \2 time zone", t)
    if t in _SIMPLE:
        return _SIMPLE[t]
    if _STRINGLIKE.match(t):
        return pa.string()
    m = _NUMERIC.match(t.replace(" ", ""))
    if m:
        if m.group(1) is None:
            return UNBOUNDED_NUMERIC
        precision, scale = int(m.group(1)), int(m.group(2))
        if precision > 38:
            return UNBOUNDED_NUMERIC
        return pa.decimal128(precision, scale)
    raise TableError(
        f"column type {pg_type!r} is not supported yet; exclude the table or change the column type"
    )


def decode_text_column(values: pa.Array, target: pa.DataType) -> pa.Array:
    """Postgres text-format strings (nulls allowed) -> an Arrow array of `target`, vectorized."""
    if pa.types.is_string(target):
        return values
    if pa.types.is_list(target):
        return _decode_array(values, target)
    if pa.types.is_boolean(target):
        return pc.equal(values, "t")
    if pa.types.is_binary(target):
        # bytea text format is '\x' followed by hex digits.
        con = engine.cursor()
        try:
            con.register("text", pa.table({"v": values}))
            decoded = con.sql("SELECT from_hex(substr(v, 3)) AS v FROM text").to_arrow_table()
        finally:
            con.close()
        return pc.cast(decoded.column(0).combine_chunks(), pa.binary())
    return pc.cast(values, target)


_DUCKDB_ELEMENT = {"int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
                   "bool": "BOOLEAN", "string": "VARCHAR"}


def _decode_array(values: pa.Array, target: pa.ListType) -> pa.Array:
    """Postgres array text ('{1,2,NULL}', '{a,"b c"}') -> an Arrow list, cast by DuckDB."""
    element = target.value_type
    if pa.types.is_decimal(element):
        sql_type = f"DECIMAL({element.precision},{element.scale})"
    else:
        sql_type = _DUCKDB_ELEMENT[str(element)]
    if pc.any(pc.starts_with(values, "{{")).as_py():
        raise TableError("multi-dimensional arrays are not supported yet")
    con = engine.cursor()
    try:
        con.register("arrays", pa.table({"v": values}))
        out = con.sql(f"SELECT CAST('[' || substr(v, 2, length(v) - 2) || ']' AS {sql_type}[]) AS v FROM arrays")
        return out.to_arrow_table().column(0).combine_chunks().cast(target)
    finally:
        con.close()
