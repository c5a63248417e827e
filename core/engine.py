"""The process's vectorized engine: one in-memory DuckDB database, a cheap cursor per use.

Opening a DuckDB connection and setting its time zone costs tens of milliseconds; a cursor on a
shared database costs microseconds. Cursors are independent connections, safe across threads.
"""

from __future__ import annotations

import threading

import duckdb

_lock = threading.Lock()
_database: duckdb.DuckDBPyConnection | None = None


def cursor() -> duckdb.DuckDBPyConnection:
    """A fresh connection to the shared database (time zone UTC); close it when done."""
    global _database
    if _database is None:
        with _lock:
            if _database is None:
                db = duckdb.connect()
                db.execute("SET GLOBAL TimeZone = 'UTC'")
                _database = db
    return _database.cursor()
