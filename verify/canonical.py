"""One canonical text form of a row, computed identically by Postgres (SQL) and DuckDB (Arrow).

The form follows the replica's Arrow type of each column, so both sides spell a value the same
way whatever the source's text output does:

| Arrow type          | canonical text                                                       |
|---------------------|----------------------------------------------------------------------|
| integers            | decimal digits                                                       |
| boolean             | `t` / `f`                                                            |
| decimal(p, s)       | the value at scale s (`1.50`)                                        |
| float32 / float64   | the IEEE bits as a signed integer (exact; NaN and -0 included)       |
| date                | days since 1970-01-01                                                |
| timestamp (tz/ntz)  | microseconds since the epoch (UTC)                                   |
| string              | the source's text output (json, uuid, inet, interval... as copied)   |
| binary              | lower-case hex                                                       |

A row's text joins its columns with `|`, each as `<byte length>:<text>` or `N` for NULL (so no
value can imitate another). Its hash is the first 60 bits of md5(row text) as a non-negative
bigint; a range's checksum is (row count, sum of row hashes): order-independent and exact.

On the replica side float columns are reinterpreted as integers in Arrow (`prepare_batch`)
before DuckDB sees them; everything else is plain SQL on both sides.
"""

from __future__ import annotations

import pyarrow as pa

from htap.connectors.pgtypes import replica_value_sql
from htap.errors import HtapError
from htap.replica.models import TableInfo

HASH_HEX_DIGITS = 15  # 60 bits: positive in a bigint on both sides


class CanonicalError(HtapError):
    """A column type the verifier cannot compare exactly yet."""


def qi(name: str) -> str:
    """A quoted identifier (Postgres and DuckDB alike)."""
    return '"' + name.replace('"', '""') + '"'


def _pg_column(name: str, source_type: str, t: pa.DataType, c: str) -> str:
    """`c`: the column's value as the replica holds it (htap.connectors.pgtypes.replica_value_sql)."""
    if pa.types.is_integer(t):
        return f"{c}::text"
    if pa.types.is_boolean(t):
        return f"CASE WHEN {c} THEN 't' ELSE 'f' END"
    if pa.types.is_decimal(t):
        return f"{c}::numeric({t.precision},{t.scale})::text"
    if pa.types.is_float64(t):
        return f"('x' || encode(float8send({c}::float8), 'hex'))::bit(64)::bigint::text"
    if pa.types.is_float32(t):
        return f"('x' || encode(float4send({c}::float4), 'hex'))::bit(32)::int::text"
    if pa.types.is_date32(t):
        return f"({c} - DATE '1970-01-01')::text"
    if pa.types.is_timestamp(t):
        return f"(extract(epoch FROM {c}) * 1000000)::bigint::text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"encode({c}, 'hex')"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # concat() uses the type's output function: char(n) keeps its padding and inet its
        # form, exactly as the copy and the change stream delivered them.
        return f"concat({c})"
    raise CanonicalError(f"column {name} ({source_type}, Arrow {t}) cannot be verified yet")


def _duck_column(name: str, t: pa.DataType) -> str:
    c = qi(name)
    if pa.types.is_integer(t) or pa.types.is_floating(t):  # floats arrive as their bits (prepare_batch)
        return f"CAST({c} AS VARCHAR)"
    if pa.types.is_boolean(t):
        return f"CASE WHEN {c} THEN 't' ELSE 'f' END"
    if pa.types.is_decimal(t):
        return f"CAST({c} AS VARCHAR)"
    if pa.types.is_date32(t):
        return f"CAST(date_diff('day', DATE '1970-01-01', {c}) AS VARCHAR)"
    if pa.types.is_timestamp(t):
        return f"CAST(epoch_us({c}) AS VARCHAR)"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"lower(hex({c}))"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return c
    raise CanonicalError(f"column {name} (Arrow {t}) cannot be verified yet")


def _my_column(name: str, source_type: str, t: pa.DataType, c: str) -> str:
    """MySQL/MariaDB: `c` is the column's value as the replica holds it (the initial copy's
    expression, htap.connectors.mytypes.copy_expression); the session time zone is UTC."""
    if pa.types.is_integer(t):
        return f"CAST({c} AS CHAR)"
    if pa.types.is_decimal(t):
        return f"CAST(CAST({c} AS DECIMAL({t.precision},{t.scale})) AS CHAR)"
    if pa.types.is_date32(t):
        return f"CAST(DATEDIFF({c}, '1970-01-01') AS CHAR)"
    if pa.types.is_timestamp(t):
        return f"CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c}) AS CHAR)"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"LOWER(HEX({c}))"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return f"CAST({c} AS CHAR)"
    # Floats: MySQL has no way to spell a double's bits, and its shortest text differs from DuckDB's.
    raise CanonicalError(f"column {name} ({source_type}, Arrow {t}) cannot be verified on a MySQL/MariaDB source yet")


def _field(value: str, text: str, dialect: str) -> str:
    if dialect == "mysql":
        return f"CASE WHEN {value} IS NULL THEN 'N' ELSE CONCAT(LENGTH({text}), ':', {text}) END"
    size = f"octet_length({text})::text" if dialect == "postgres" else f"CAST(strlen({text}) AS VARCHAR)"
    return f"CASE WHEN {value} IS NULL THEN 'N' ELSE {size} || ':' || {text} END"


def qi_my(name: str) -> str:
    """A MySQL quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


class Canonical:
    """The canonical SQL expressions of one table, for its source (`source_dialect`: postgres or
    mysql) and for DuckDB."""

    def __init__(self, table: TableInfo, source_dialect: str = "postgres"):
        schema = table.arrow_schema
        self.table = table
        self.columns = list(schema.names)
        self.key = list(table.key)
        by_name = {c.name: c for c in table.columns}
        source_type = {f.name: by_name[f.name].source_type if f.name in by_name else "?" for f in schema}
        # The source side starts from each value's fate (NaN numerics NULL, infinite dates clamped, ...).
        if source_dialect == "mysql":
            from htap.connectors.mytypes import copy_expression

            self.source_value = {
                f.name: copy_expression(f.name, by_name[f.name].source_type, by_name[f.name].override)
                if f.name in by_name else qi_my(f.name)
                for f in schema
            }
            self.source = {f.name: _my_column(f.name, source_type[f.name], f.type, self.source_value[f.name]) for f in schema}
        else:
            self.source_value = {
                f.name: replica_value_sql(f.name, by_name[f.name].source_type, f.type, by_name[f.name].override)
                if f.name in by_name else qi(f.name)
                for f in schema
            }
            self.source = {f.name: _pg_column(f.name, source_type[f.name], f.type, self.source_value[f.name]) for f in schema}
        self.duck = {f.name: _duck_column(f.name, f.type) for f in schema}

    def text(self, dialect: str, columns: list[str] | None = None) -> str:
        """`dialect`: duckdb, or the source's."""
        exprs = self.duck if dialect == "duckdb" else self.source
        values = {c: qi(c) for c in self.columns} if dialect == "duckdb" else self.source_value
        parts = [_field(values[c], exprs[c], dialect) for c in (columns or self.columns)]
        if dialect == "mysql":
            return "CONCAT(" + ", '|', ".join(parts) + ")"
        return " || '|' || ".join(parts)

    def row_md5(self, dialect: str) -> str:
        return f"md5({self.text(dialect)})"

    def row_hash(self, dialect: str) -> str:
        md5 = self.row_md5(dialect)
        if dialect == "postgres":
            return f"('x' || substr({md5}, 1, {HASH_HEX_DIGITS}))::bit({HASH_HEX_DIGITS * 4})::bigint"
        if dialect == "mysql":
            return f"CAST(CONV(SUBSTR({md5}, 1, {HASH_HEX_DIGITS}), 16, 10) AS UNSIGNED)"
        return f"CAST('0x' || substr({md5}, 1, {HASH_HEX_DIGITS}) AS BIGINT)"

    def key_text(self, dialect: str) -> str:
        return self.text(dialect, self.key)

    def column_text(self, dialect: str, column: str) -> str:
        """One column's part of the row text (NULL-aware)."""
        return self.text(dialect, [column])


def prepare_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Floats as their IEEE bits (int32/int64), so DuckDB prints exactly what Postgres does."""
    if not any(pa.types.is_floating(f.type) for f in batch.schema):
        return batch
    arrays, fields = [], []
    for col, f in zip(batch.columns, batch.schema):
        if pa.types.is_float64(f.type):
            col, f = col.view(pa.int64()), pa.field(f.name, pa.int64())
        elif pa.types.is_float32(f.type):
            col, f = col.view(pa.int32()), pa.field(f.name, pa.int32())
        arrays.append(col)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def prepared_schema(schema: pa.Schema) -> pa.Schema:
    fields = []
    for f in schema:
        if pa.types.is_float64(f.type):
            f = pa.field(f.name, pa.int64())
        elif pa.types.is_float32(f.type):
            f = pa.field(f.name, pa.int32())
        fields.append(f)
    return pa.schema(fields)
