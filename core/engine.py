"""The process's vectorized engine: one in-memory DuckDB database, a cheap cursor per use.

Opening a DuckDB connection and setting its time zone costs tens of milliseconds; a cursor on a
shared database costs microseconds. Cursors are independent connections, safe across threads.
"""

from __future__ import annotations

import threading

import duckdb

_lock = threading.Lock()
_database: duckdb.DuckDBPyConnection | None = None


def cursor(*, exact_floats: bool = False) -> duckdb.DuckDBPyConnection:
    """A fresh connection to the shared database (time zone UTC); close it when done.

    `exact_floats`: the data has floating point columns whose -0.0 must survive. DuckDB rewrites
    `QUALIFY row_number() OVER (PARTITION BY ... ORDER BY ...) = 1` (our merge) into an arg_max
    aggregate whose carried values lose the sign of zero; this turns that rewrite off (the plain
    window is 10-25 % slower on wide merges, so only where floats need it)."""
    global _database
    if _database is None:
        with _lock:
            if _database is None:
                db = duckdb.connect()
                db.execute("SET GLOBAL TimeZone = 'UTC'")
                _database = db
    con = _database.cursor()
    if exact_floats:
        con.execute("SET disabled_optimizers = 'top_n_window_elimination'")
    return con


def size_threads(threads: int) -> None:
    """Give the process's DuckDB `threads` worker threads (a Spark task's share of the machine:
    htap.pushdown.datasource sizes it per task, so two tasks on two cores do not run four
    threads). A no-op when already so."""
    global _threads
    threads = max(1, int(threads))
    if threads != _threads:
        cursor().execute(f"SET GLOBAL threads = {threads}").close()
        _threads = threads


_threads: int | None = None


def has_floats(schema) -> bool:
    """Whether an Arrow schema (or type) holds floating point values anywhere (lists included)."""
    import pyarrow as pa

    if isinstance(schema, pa.Schema):
        return any(has_floats(f.type) for f in schema)
    if pa.types.is_floating(schema):
        return True
    if pa.types.is_list(schema) or pa.types.is_large_list(schema):
        return has_floats(schema.value_type)
    if pa.types.is_struct(schema):
        return any(has_floats(schema.field(i).type) for i in range(schema.num_fields))
    return False
