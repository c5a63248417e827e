"""Bulk reads from Postgres as typed Arrow batches: the initial copy and source reads.

Through ADBC's Postgres driver (`adbc-driver-postgresql`: libpq, `COPY ... TO STDOUT (FORMAT
binary)` decoded in C++ into Arrow). Binary COPY frames every value with its length, so no value
(text with newlines, quotes, backslashes — also as a key) can split or merge rows, which CSV
parsed in blocks could (issue 11). Measured against the CSV path it replaced: see the docs
(Benchmarks, initial copy).

How each column travels, by its replica type:
- integers, floats, boolean, bytea, date, timestamp(tz) of the same Postgres type: binary, exact
  (-0.0, NaN, +-Infinity floats; BC and far-future dates); date/timestamp +-infinity get their
  fate (see pgtypes) from the driver's (wrapped) encodings;
- everything else (text types keep the driver's text, which is the value's output; decimals,
  arrays, uuid, json, interval, time, inet, overrides...): the value's text output, decoded by
  `pgtypes.decode_text_column` — the very decoder the change stream uses, so the copy, the
  stream and source reads give a value one fate.
"""

from __future__ import annotations

import queue
import re
import threading
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from htap.connectors.changes import decode_checked
from htap.connectors.pgtypes import (
    DATE_NEG_INFINITY,
    DATE_POS_INFINITY,
    TIMESTAMP_NEG_INFINITY,
    TIMESTAMP_POS_INFINITY,
    decode_text_column,
)
from htap.connectors.queryable import SNAPSHOT_GONE
from htap.errors import PoisonError, SourceError, TableError

SESSION = {"TimeZone": "UTC", "DateStyle": "ISO", "extra_float_digits": "3", "IntervalStyle": "iso_8601"}
BATCH_BYTES = 16 << 20
PREFETCH_BATCHES = 2  # read ahead while the caller writes: the server, the driver and Parquet overlap

# Postgres types (as the driver names them) that travel in binary when the replica type is theirs.
_BINARY = {
    "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(), "float4": pa.float32(), "float8": pa.float64(),
    "bool": pa.bool_(), "bytea": pa.binary(), "date": pa.date32(),
    "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"),
}
# Whose binary form is their text output (bpchar keeps its padding, which ::text would strip).
_TEXT_AS_IS = {"text", "varchar", "bpchar", "name", "json", "jsonb", "char"}
# Whose ::text cast is not their output function (inet '::1' would become '::1/128', bool 'true').
_OUTPUT_FUNCTION = {"inet", "cidr", "bool"}

# Postgres' smallest date / timestamp (4714-11-24 BC), days / microseconds since 1970: anything
# below is the driver's encoding of +-infinity (it adds the 2000-01-01 offset to INT_MIN/MAX,
# wrapping), or a timestamp beyond int64 microseconds since 1970.
_PG_MIN_DATE = -2440588
_PG_MIN_TIMESTAMP = -210866803200000000
_WRAPPED_DATE = {np.int32(-2147472692): DATE_POS_INFINITY, np.int32(-2147472691): DATE_NEG_INFINITY}
_WRAPPED_TIMESTAMP = {np.int64(-9222425352054775809): TIMESTAMP_POS_INFINITY,
                      np.int64(-9222425352054775808): TIMESTAMP_NEG_INFINITY}


def _literal(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _pg_type(field: pa.Field) -> str:
    return (field.metadata or {}).get(b"POSTGRESQL:type", b"").decode()


def _binary(pg_type: str, target: pa.DataType) -> bool:
    natural = _BINARY.get(pg_type)
    return natural is not None and natural.equals(target)


def _select(column: str, pg_type: str, target: pa.DataType) -> str:
    if _binary(pg_type, target) or (pa.types.is_string(target) and pg_type in _TEXT_AS_IS):
        return column
    if pg_type in _OUTPUT_FUNCTION:
        return f"CASE WHEN {column} IS NOT NULL THEN concat({column}) END"
    return f"{column}::text"


def _wrap(query: str, described: pa.Schema, output: pa.Schema) -> tuple[str, list[bool]]:
    """The query with each column selected as it travels best; which columns travel as text."""
    if len(described) != len(output):
        raise SourceError(f"the query returns {len(described)} columns, {len(output)} were expected")
    aliases = ", ".join(f"c{i}" for i in range(len(output)))
    exprs, text = [], []
    for i, (d, f) in enumerate(zip(described, output)):
        pg_type = _pg_type(d)
        exprs.append(_select(f"q.c{i}", pg_type, f.type))
        text.append(not _binary(pg_type, f.type))
    # A newline before ')' so that a trailing `-- comment` in the query cannot swallow it.
    return f"SELECT {', '.join(exprs)} FROM (\n{query}\n) AS q({aliases})", text


def _temporal(a: pa.Array, target: pa.DataType, name: str) -> pa.Array:
    """The driver's dates/timestamps with +-infinity given their fate; beyond Spark's range: poison."""
    date = pa.types.is_date32(target)
    storage = a.cast(pa.int32() if date else pa.int64())
    low = pc.min(storage).as_py()
    if low is None or low >= (_PG_MIN_DATE if date else _PG_MIN_TIMESTAMP):
        return a if a.type.equals(target) else a.cast(target)  # the common case: no copy
    values = storage.fill_null(0).to_numpy(zero_copy_only=False).copy()
    for wrapped, fate in (_WRAPPED_DATE if date else _WRAPPED_TIMESTAMP).items():
        values[values == wrapped] = fate
    bad = values < (_PG_MIN_DATE if date else _PG_MIN_TIMESTAMP)
    if bad.any():
        row = int(np.argmax(bad))
        raise PoisonError(name, None, "a timestamp after 294247-01-10, beyond the range of Spark's TIMESTAMP "
                          f"(replica type {target})", row=row)
    return pa.array(values, storage.type, mask=a.is_null().to_numpy(zero_copy_only=False)).cast(target)


def _convert(batch: pa.RecordBatch, output: pa.Schema, text: list[bool]) -> pa.RecordBatch:
    arrays = []
    for col, f, is_text in zip(batch.columns, output, text):
        if isinstance(col.type, pa.ExtensionType):
            col = col.storage
        if is_text:
            arrays.append(decode_checked(decode_text_column, col, f.type, f.name))
        elif pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type):
            arrays.append(_temporal(col, f.type, f.name))
        else:
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=output)


def _detail(e: BaseException) -> str:
    """A driver error's first line, without libpq's prefix."""
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[libpq\]\s*", "", detail)


def _error(e: BaseException, what: str) -> Exception:
    """A driver error as ours: a problem of the table or query (TableError) or of the source."""
    detail = _detail(e)
    state = getattr(e, "sqlstate", None) or ""
    if state.startswith("42") or state.startswith("22"):  # privileges, names, data
        return TableError(f"{what}: {detail}")
    return SourceError(f"{what}: {detail}")


def import_failure(e: BaseException) -> str:
    """Why importing an exported snapshot failed, for a message: one that is gone (its exporter
    ended: Postgres says "invalid snapshot identifier") is said plainly, with what to do."""
    return SNAPSHOT_GONE if "invalid snapshot identifier" in str(e) else _detail(e)


def read_arrow(dsn: str, query: str, output: pa.Schema, snapshot: str | None = None, what: str = "query on the source",
               prefetch: int = PREFETCH_BATCHES) -> Iterator[pa.RecordBatch]:
    """Run one SELECT on the source in a REPEATABLE READ, READ ONLY transaction (at the exported
    `snapshot` if given) and stream its rows as batches of `output`'s types (one per column, in
    order). Memory stays bounded (about (prefetch + 2) x 16 MiB); closing early cancels."""
    if prefetch <= 0:
        yield from _read(dsn, query, output, snapshot, what)
        return
    q: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        gen = _read(dsn, query, output, snapshot, what)
        try:
            for b in gen:
                if not put(b):
                    return
            put(done)
        except BaseException as e:  # noqa: BLE001  (raised in the consumer)
            put(e)
        finally:
            gen.close()

    worker = threading.Thread(target=produce, name="pg-read", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _read(dsn: str, query: str, output: pa.Schema, snapshot: str | None, what: str) -> Iterator[pa.RecordBatch]:
    try:
        import adbc_driver_manager
        import adbc_driver_postgresql.dbapi as pgdb
    except ImportError as e:  # a dependency of spark-htap: a broken install
        raise SourceError(f"the Postgres bulk driver is missing ({e}): pip install adbc-driver-postgresql") from e
    try:
        conn = pgdb.connect(dsn, autocommit=True)
    except adbc_driver_manager.Error as e:
        raise SourceError(f"{what}: cannot connect to Postgres: {str(e).strip().splitlines()[0]}") from e
    cur = reader = None
    try:
        try:
            cur = conn.cursor()
            for key, value in SESSION.items():
                cur.execute(f"SET {key} = {_literal(value)}")
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if snapshot:
                try:
                    cur.execute(f"SET TRANSACTION SNAPSHOT {_literal(snapshot)}")
                except adbc_driver_manager.Error as e:
                    raise SourceError(f"{what}: cannot import snapshot {snapshot}: {import_failure(e)}") from e
            cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_BYTES)})
            body = re.sub(r"[\s;]+$", "", query)
            wrapped, text = _wrap(body, cur.adbc_execute_schema(body), output)
            cur.execute(wrapped)
            reader = cur.fetch_record_batch()
        except adbc_driver_manager.Error as e:
            raise _error(e, what) from e
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (adbc_driver_manager.Error, pa.ArrowException) as e:
                raise _error(e, what) from e
            yield _convert(batch, output, text)
    finally:
        if reader is not None:
            reader.close()
        if cur is not None:
            cur.close()
        conn.close()


def table_query(schema: str, table: str, columns: list[str]) -> str:
    def ident(s: str) -> str:
        return '"' + s.replace('"', '""') + '"'

    return f"SELECT {', '.join(ident(c) for c in columns)} FROM {ident(schema)}.{ident(table)}"
