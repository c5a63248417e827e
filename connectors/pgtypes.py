"""Postgres types: the fate of every value (its replica type), and vectorized text decoding.

Values reach the replica in Postgres' text format: the pgoutput stream always, and the initial
copy and source reads for every column whose replica type is text or decimal or an array (see
`htap.connectors.pgcopy`). Changes are buffered as columns of text and decoded here, one
vectorized pass per column per checkpoint, so the hot path never converts values one by one
in Python. Sessions that produce text use TimeZone=UTC, DateStyle=ISO, extra_float_digits=3
and IntervalStyle=iso_8601 (`SESSION_SETTINGS`), which makes the formats below exact.

Fates (the docs' Types reference says the same):

- integers, boolean, text types, uuid, json, jsonb, time, interval, inet, bytea: exact.
- real / double precision: exact, including NaN, +-Infinity and -0.0.
- numeric(p,s), p <= 38: DECIMAL(p,s); NaN (the one value Spark's DECIMAL cannot hold; Postgres
  rejects infinities in a numeric with a precision) becomes NULL. Unconstrained numeric and
  numeric(p > 38) have no replica type that holds every value: `tables add` refuses them and
  names the way out (`--column-type col=string|double|decimal(p,s)`).
- date / timestamp / timestamptz: exact in proleptic Gregorian astronomical numbering (1 BC is
  year 0, as in Spark), also after the year 9999; 'infinity' / '-infinity' become Spark's
  largest / smallest value of the range it documents (9999-12-31 [23:59:59.999999] and
  0001-01-01 [00:00:00]). Timestamps after 294247-01-10 (past Spark's TIMESTAMP range, microseconds
  since 1970 in an int64) fail their table (poison).
- one-dimensional arrays of these types: ARRAY<element>, element by element with the fates
  above (a non-default lower bound, '[0:2]={...}', is not kept); a multi-dimensional value fails
  its table (poison): `--column-type col=string` keeps the array's text instead.
"""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from htap import engine
from htap.errors import TableError

SESSION_SETTINGS = "-c TimeZone=UTC -c DateStyle=ISO -c extra_float_digits=3 -c IntervalStyle=iso_8601"

# 'infinity' / '-infinity' of date and timestamp columns: the ends of the range Spark documents.
DATE_POS_INFINITY = 2932896  # 9999-12-31, days since 1970-01-01
DATE_NEG_INFINITY = -719162  # 0001-01-01
TIMESTAMP_POS_INFINITY = 253402300799999999  # 9999-12-31 23:59:59.999999, microseconds since 1970
TIMESTAMP_NEG_INFINITY = -62135596800000000  # 0001-01-01 00:00:00
# Spark's TIMESTAMP is an int64 of microseconds since 1970: days beyond this do not fit.
_MAX_TIMESTAMP_DAYS = (2**63 - 1) // 86_400_000_000 - 1

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
    "time with time zone": pa.string(),
    "uuid": pa.string(),
    "json": pa.string(),
    "jsonb": pa.string(),
    "bytea": pa.binary(),
    "name": pa.string(),
    "inet": pa.string(),
    "cidr": pa.string(),
    "macaddr": pa.string(),
    "macaddr8": pa.string(),
    "xml": pa.string(),
    "interval": pa.string(),
}
_STRINGLIKE = re.compile(r"^(character varying|character|varchar|char|bpchar|bit|bit varying)(\(\d+\))?$")
_NUMERIC = re.compile(r"^numeric(?:\((\d+),(-?\d+)\))?$")
_TIMESTAMP_P = re.compile(r"^(timestamp|time)\(\d\) (with|without) time zone$")
_INTERVAL_P = re.compile(r"^interval\b.*$")


def arrow_type(pg_type: str) -> pa.DataType:
    """Arrow type for a Postgres type as `format_type()` spells it; TableError (saying why) when
    no replica type holds all of its values. One-dimensional arrays of the scalar types map to
    Arrow lists (Spark ARRAY)."""
    t = pg_type.strip().lower()
    if t.endswith("[]"):
        try:
            return pa.list_(arrow_type(t[:-2]))
        except TableError as e:
            raise TableError(f"type {pg_type!r} is not supported: its elements: {e}") from e
    t = _TIMESTAMP_P.sub(r"\1 \2 time zone", t)
    if t in _SIMPLE:
        return _SIMPLE[t]
    if _STRINGLIKE.match(t) or _INTERVAL_P.match(t):
        return pa.string()
    m = _NUMERIC.match(t.replace(" ", ""))
    if m:
        if m.group(1) is None:
            raise TableError(
                f"type {pg_type!r} is not supported without a precision: it holds values no Spark type holds "
                f"exactly (more than 38 digits, NaN, Infinity)"
            )
        precision, scale = int(m.group(1)), int(m.group(2))
        if precision > 38:
            raise TableError(f"type {pg_type!r} is not supported: Spark's DECIMAL holds 38 digits, this column {precision}")
        if scale < 0 or scale > precision:
            raise TableError(f"type {pg_type!r} is not supported: Spark's DECIMAL needs 0 <= scale <= precision")
        return pa.decimal128(precision, scale)
    raise TableError(f"type {pg_type!r} is not supported")


def decode_text_column(values: pa.Array, target: pa.DataType) -> pa.Array:
    """Postgres text-format strings (nulls allowed) -> an Arrow array of `target`, vectorized.

    Raises (ArrowInvalid, ValueError, TableError) for a value `target` cannot hold."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_string(target):
        return values
    if pa.types.is_list(target):
        return _decode_array(values, target)
    if pa.types.is_boolean(target):
        return pc.equal(values, "t")
    if pa.types.is_binary(target):
        return _decode_bytea(values)
    if pa.types.is_decimal(target):
        # NaN is the one numeric value a DECIMAL cannot hold: NULL (see the module docstring).
        nan = pc.equal(values, "NaN")
        if pc.any(nan).as_py():
            values = pc.if_else(nan, pa.scalar(None, pa.string()), values)
        return pc.cast(values, target)
    if pa.types.is_date32(target):
        try:
            return pc.cast(values, target)
        except pa.ArrowInvalid:
            return _decode_dates(values)  # infinity, BC, years after 9999
    if pa.types.is_timestamp(target):
        try:
            return pc.cast(values, target)
        except pa.ArrowInvalid:
            return _decode_timestamps(values, target)
    return pc.cast(values, target)


def _decode_bytea(values: pa.Array) -> pa.Array:
    """bytea's text format is '\\x' followed by hex digits."""
    con = engine.cursor()
    try:
        con.register("text", pa.table({"v": values}))
        decoded = con.sql("SELECT from_hex(substr(v, 3)) AS v FROM text").to_arrow_table()
    except (duckdb.ConversionException, duckdb.InvalidInputException) as e:  # not bytea text
        raise ValueError(f"not bytea text: {str(e).splitlines()[0]}") from e
    finally:
        con.close()
    return pc.cast(decoded.column(0).combine_chunks(), pa.binary())


# --- dates and timestamps beyond what Arrow's ISO parser takes ----------------------------------

_TS_PATTERN = r"^(?P<y>\d{4,})-(?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))?" \
              r"(?:(?P<sign>[+-])(?P<oh>\d\d)(?::(?P<om>\d\d))?(?::(?P<os>\d\d))?)?(?P<bc> BC)?$"


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (astronomical years: 0 = 1 BC), for any
    year (H. Hinnant's algorithm, vectorized)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _ints(parts: pa.StructArray, name: str) -> np.ndarray:
    return pc.cast(parts.field(name), pa.int64()).to_numpy(zero_copy_only=False)


def _civil_days(parts: pa.StructArray) -> np.ndarray:
    year = _ints(parts, "y")
    bc = pc.equal(parts.field("bc"), " BC").to_numpy(zero_copy_only=False)
    year = np.where(bc, 1 - year, year)  # 1 BC is year 0
    return days_from_civil(year, _ints(parts, "mo"), _ints(parts, "d"))


def _special(values: pa.Array, pattern: str) -> tuple[np.ndarray, np.ndarray, pa.StructArray, np.ndarray]:
    """(+infinity mask, -infinity mask, regex parts with infinities and nulls filled, null mask)."""
    pos = pc.fill_null(pc.equal(values, "infinity"), False).to_numpy(zero_copy_only=False)
    neg = pc.fill_null(pc.equal(values, "-infinity"), False).to_numpy(zero_copy_only=False)
    nulls = pc.is_null(values).to_numpy(zero_copy_only=False)
    plain = pc.if_else(pc.or_(pc.is_null(values), pc.or_(pa.array(pos), pa.array(neg))),
                       pa.scalar(_FILLER[pattern], pa.string()), values)
    matched = pc.match_substring_regex(plain, pattern)
    if not pc.all(matched).as_py():
        bad = plain.filter(pc.invert(matched))[0].as_py()
        raise ValueError(f"not a Postgres ISO date/time: {bad!r}")
    return pos, neg, pc.extract_regex(plain, pattern), nulls


_DATE_PATTERN = r"^(?P<y>\d{4,})-(?P<mo>\d\d)-(?P<d>\d\d)(?P<bc> BC)?$"
_FILLER = {_DATE_PATTERN: "1970-01-01", _TS_PATTERN: "1970-01-01 00:00:00"}


def _decode_dates(values: pa.Array) -> pa.Array:
    pos, neg, parts, nulls = _special(values, _DATE_PATTERN)
    days = _civil_days(parts)
    days = np.where(pos, DATE_POS_INFINITY, np.where(neg, DATE_NEG_INFINITY, days))
    if (np.abs(days[~nulls]) >= 2**31).any():
        raise ValueError("date beyond the range of Spark's DATE")
    return pa.array(days.astype(np.int32), pa.date32(), mask=nulls)


def _decode_timestamps(values: pa.Array, target: pa.TimestampType) -> pa.Array:
    pos, neg, parts, nulls = _special(values, _TS_PATTERN)
    days = _civil_days(parts)
    if (np.abs(days[~(nulls | pos | neg)]) > _MAX_TIMESTAMP_DAYS).any():
        raise ValueError("timestamp beyond the range of Spark's TIMESTAMP (294247-01-10)")
    fraction = pc.utf8_rpad(parts.field("f"), 6, "0")  # unmatched optional groups are ""
    offset = np.zeros(len(values), dtype=np.int64)
    if pc.any(pc.not_equal(parts.field("sign"), "")).as_py():
        sign = np.where(pc.equal(parts.field("sign"), "-").to_numpy(zero_copy_only=False), -1, 1)

        def number(name: str) -> np.ndarray:
            text = pc.utf8_lpad(parts.field(name), 1, "0")
            return pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False)

        offset = sign * ((number("oh") * 60 + number("om")) * 60 + number("os")) * 1_000_000
    micros = (
        days * 86_400_000_000
        + ((_ints(parts, "h") * 60 + _ints(parts, "mi")) * 60 + _ints(parts, "s")) * 1_000_000
        + pc.cast(fraction, pa.int64()).to_numpy(zero_copy_only=False)
        - offset
    )
    micros = np.where(pos, TIMESTAMP_POS_INFINITY, np.where(neg, TIMESTAMP_NEG_INFINITY, micros))
    return pa.array(micros, pa.int64(), mask=nulls).cast(target)


# --- arrays -------------------------------------------------------------------------------------

# One element of a Postgres array's text: a quoted string (with backslash escapes) or a bare word.
_ELEMENT = r'"(?:[^"\\]|\\.)*"|[^,]+'


def _decode_array(values: pa.Array, target: pa.ListType) -> pa.Array:
    """Postgres 1-D array text ('{1,2,NULL}', '{a,"b c","x\\"y"}', '[0:2]={...}') -> an Arrow
    list; each element decoded like a scalar of the element type. Multi-dimensional: TableError."""
    # Strip an explicit bounds prefix ('[0:2]='); the elements stay.
    body = pc.replace_substring_regex(values, r"^\[[^\]]*\]=", "")
    if pc.any(pc.starts_with(body, "{{")).as_py():
        raise TableError("multi-dimensional array: Spark ARRAY columns here are one-dimensional")
    con = engine.cursor()
    try:
        con.register("arrays", pa.table({"v": body}))
        out = con.sql(
            "SELECT list_transform(regexp_extract_all(substr(v, 2, length(v) - 2), ?), "
            "lambda x: CASE WHEN x = 'NULL' THEN NULL WHEN x[1] = '\"' "
            "THEN regexp_replace(substr(x, 2, length(x) - 2), '\\\\(.)', '\\1', 'g') ELSE x END) AS v FROM arrays",
            params=[_ELEMENT],
        ).to_arrow_table()
    except (duckdb.ConversionException, duckdb.InvalidInputException) as e:
        raise ValueError(f"not a Postgres array: {str(e).splitlines()[0]}") from e
    finally:
        con.close()
    lists = out.column(0).combine_chunks()
    if not isinstance(lists, pa.ListArray):
        lists = lists.cast(pa.list_(pa.string()))
    elements = decode_text_column(lists.values, target.value_type)
    return pa.ListArray.from_arrays(lists.offsets, elements, type=target, mask=lists.is_null())


# --- the same fates in SQL (source reads and the verifier run on the source's own values) -------

_TIMESTAMP_SQL = {
    "timestamp": ("'9999-12-31 23:59:59.999999'::timestamp", "'0001-01-01 00:00:00'::timestamp"),
    "timestamptz": ("'9999-12-31 23:59:59.999999+00'::timestamptz", "'0001-01-01 00:00:00+00'::timestamptz"),
    "date": ("'9999-12-31'::date", "'0001-01-01'::date"),
}


def replica_value_sql(column: str, source_type: str, target: pa.DataType, override: str | None = None) -> str:
    """A Postgres SQL expression of the column's value as the replica holds it (its fate): what
    a source read must filter and aggregate on so that both routes agree."""
    c = '"' + column.replace('"', '""') + '"'
    t = source_type.strip().lower()
    if override and pa.types.is_string(target):
        # The type's output function, as the copy and the stream deliver it (inet::text differs).
        return f"CASE WHEN {c} IS NOT NULL THEN concat({c}) END"
    if override and pa.types.is_floating(target):
        return f"{c}::float8"
    if pa.types.is_decimal(target) and t.startswith("numeric"):
        return f"NULLIF({c}, 'NaN')"
    if pa.types.is_date32(target) and t == "date":
        kind = "date"
    elif pa.types.is_timestamp(target) and t.startswith("timestamp") and not t.endswith("[]"):
        kind = "timestamptz" if target.tz else "timestamp"
    else:
        return c
    pos, neg = _TIMESTAMP_SQL[kind]
    return f"CASE WHEN {c} = 'infinity' THEN {pos} WHEN {c} = '-infinity' THEN {neg} ELSE {c} END"
