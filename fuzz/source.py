"""The schema's tables in Postgres: created, loaded, then changed in batches after the replica's
initial copy, so that the replica reads its rows through several deltas (updates of value and
key columns, deletes, inserts, a TOASTed value left unchanged by an update of another column).

Values go to Postgres as text cast to the column's type (`(%s)::double precision`): psycopg2
would send -0.0 as a numeric literal, which has no negative zero, and `-9223372036854775808::bigint`
overflows before the minus applies.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import psycopg2
import psycopg2.extras

from fuzz.schema import LONG_TEXT, Schema, Table, rows, value


def connect(dsn: str):
    conn = psycopg2.connect(dsn, options="-c TimeZone=UTC")
    conn.autocommit = True
    return conn


def _param(v: object) -> object:
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    return v


def _template(table: Table) -> str:
    return "(" + ", ".join(f"(%s)::{c.type.pg}" for c in table.columns) + ")"


def create(conn, pg_schema: str, schema: Schema) -> None:
    """CREATE TABLE and INSERT the initial rows of every table (in `pg_schema`, which exists)."""
    with conn.cursor() as cur:
        for t in schema.tables:
            cols = ", ".join(f"{c.name} {c.type.pg}{' NOT NULL' if c.key else ''}" for c in t.columns)
            key = ", ".join(c.name for c in t.key)
            cur.execute(f"CREATE TABLE {pg_schema}.{t.name} ({cols}, PRIMARY KEY ({key}))")
            insert(cur, pg_schema, t, t.rows)


def insert(cur, pg_schema: str, table: Table, new_rows: list[tuple]) -> None:
    names = ", ".join(c.name for c in table.columns)
    psycopg2.extras.execute_values(
        cur, f"INSERT INTO {pg_schema}.{table.name} ({names}) VALUES %s",
        [tuple(_param(v) for v in r) for r in new_rows], template=_template(table), page_size=500,
    )


def change(conn, pg_schema: str, schema: Schema, wait: Callable[[], None], batches: int = 3) -> int:
    """Apply `batches` random batches of changes (each a few transactions), calling `wait()` after
    each so that the replica checkpoints them into deltas of their own. Returns the number of
    statements run. Deterministic from the schema's seed (the keys it touches are tracked here)."""
    rng = random.Random(f"changes-{schema.seed}")
    ids = {t.name: [r[0] for r in t.rows] for t in schema.tables}
    fresh = {t.name: 100_000 for t in schema.tables}
    toasted: dict[str, object] = {}
    statements = 0
    conn.autocommit = False
    try:
        for batch in range(batches):
            with conn.cursor() as cur:
                for _ in range(rng.randint(2, 4)):  # transactions
                    for t in schema.tables:
                        statements += _table_changes(cur, pg_schema, t, rng, ids[t.name], fresh, toasted, batch)
                    conn.commit()
            wait()
    finally:
        conn.rollback()
        conn.autocommit = True
    return statements


def _table_changes(cur, pg_schema: str, t: Table, rng: random.Random, ids: list, fresh: dict[str, int],
                   toasted: dict[str, object], batch: int) -> int:
    name = f"{pg_schema}.{t.name}"
    values = [c for c in t.columns if not c.key]
    keyed = t.columns[0]
    n = 0

    def some(k: int) -> list:
        return rng.sample(ids, min(k, len(ids)))

    texts = [c for c in values if c.type.kind == "text"]
    if texts and batch == 0 and t.name not in toasted and ids:
        # a TOASTed value, then (next batch) an update of another column of its row only
        toasted[t.name] = (victim := rng.choice(ids))
        cur.execute(f"UPDATE {name} SET {texts[0].name} = %s WHERE {keyed.name} = %s", (LONG_TEXT, victim))
        n += 1
    elif batch == 1 and t.name in toasted and toasted[t.name] in ids:
        other = rng.choice([c for c in values if c is not texts[0]])
        cur.execute(f"UPDATE {name} SET {other.name} = {_ph(other)} WHERE {keyed.name} = %s",
                    (_param(value(other, rng)), toasted[t.name]))
        n += 1
    for _ in range(rng.randint(1, 4)):  # value updates, one column or several, of one row or many
        cols = rng.sample(values, rng.randint(1, min(3, len(values))))
        targets = some(rng.randint(1, 6))
        sets = ", ".join(f"{c.name} = {_ph(c)}" for c in cols)
        params = [None if rng.random() < 0.15 else _param(value(c, rng)) for c in cols]
        cur.execute(f"UPDATE {name} SET {sets} WHERE {keyed.name} = ANY(%s)", (*params, targets))
        n += 1
    for victim in some(rng.randint(0, 2)):  # key updates
        new = _fresh_key(keyed.type.kind, fresh, t.name)
        cur.execute(f"UPDATE {name} SET {keyed.name} = %s WHERE {keyed.name} = %s", (new, victim))
        ids.remove(victim)
        ids.append(new)
        n += 1
    gone = some(rng.randint(0, 4))  # deletes
    if gone:
        cur.execute(f"DELETE FROM {name} WHERE {keyed.name} = ANY(%s)", (gone,))
        for g in gone:
            ids.remove(g)
        n += 1
    count = rng.randint(0, 8)  # inserts
    if count:
        start = fresh[t.name]
        new_rows = rows(t, rng, count, first_key=start)
        fresh[t.name] = start + count
        insert(cur, pg_schema, t, new_rows)
        ids.extend(r[0] for r in new_rows)
        n += 1
    return n


def _ph(c) -> str:
    """A parameter cast to column `c`'s type."""
    return f"(%s)::{c.type.pg}"


def _fresh_key(kind: str, fresh: dict[str, int], table: str) -> object:
    fresh[table] += 1
    k = fresh[table] + 500_000
    return f"z{k}" if kind == "text" else k

