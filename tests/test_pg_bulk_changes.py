"""Issue 13: bulk changes through a real Postgres. Statements that change many rows reach the
stream as runs of row messages, which the stream decodes column-wise into batches
(`htap.connectors.pgoutput.tuple_columns`, `RowBatch`); runs broken by other messages, key
changes and unchanged TOAST values go row by row. Whatever the mix, the replica at its max safe
seq equals a plain SELECT of the table, value by value, for random rows of the supported types —
key changes of rows whose out-of-line value stays unchanged TOAST (taken from the old key) too.

Floats are compared by their bits (NaN, -0.0), reals as float32."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
import time
import uuid

import psycopg2
import psycopg2.extras
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htap.connectors.pgtypes import SESSION_SETTINGS

from conftest import tune
from services import pg_dsn
from workspace import wait_slot_released

UTC = dt.timezone.utc
chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.text(chars, max_size=12)

# (column, Postgres type, values; None is always possible, the SELECT expression compared)
COLUMNS = [
    ("c_int2", "smallint", st.integers(-(2**15), 2**15 - 1)),
    ("c_int8", "bigint", st.integers(-(2**63), 2**63 - 1)),
    ("c_float8", "double precision", st.floats()),
    ("c_real", "real", st.floats(width=32)),
    ("c_num", "numeric(12,3)", st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False)),
    ("c_text", "text", texts),
    ("c_big", "text", st.one_of(texts, st.text(chars, min_size=1, max_size=5).map(lambda s: (s * 2200)[:2200]))),
    ("c_varchar", "varchar(10)", st.text(chars, max_size=10)),
    ("c_char", "char(3)", st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=3)),
    ("c_bool", "boolean", st.booleans()),
    ("c_date", "date", st.dates()),
    ("c_ts", "timestamp", st.datetimes()),
    ("c_tstz", "timestamptz", st.datetimes(timezones=st.just(UTC))),
    ("c_bytea", "bytea", st.binary(max_size=16).map(psycopg2.Binary)),
    ("c_uuid", "uuid", st.uuids().map(str)),
    ("c_jsonb", "jsonb", st.dictionaries(texts, st.integers(-5, 5) | texts, max_size=3).map(json.dumps)),
    ("c_int_arr", "int[]", st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4)),
    ("c_text_arr", "text[]", st.lists(st.none() | texts, max_size=3)),
]
NAMES = [c for c, _, _ in COLUMNS]
SELECTED = ["id"] + [f"{c}::text" if t in ("uuid", "jsonb") else c for c, t, _ in COLUMNS]

rows = st.lists(
    st.tuples(st.integers(0, 999), *[st.none() | s for _, _, s in COLUMNS]), max_size=45, unique_by=lambda r: r[0]
)
ids = st.lists(st.integers(0, 3999), max_size=60)
statements = st.one_of(
    # many rows: inserts of new keys and updates of existing ones (I and U messages in one run)
    st.tuples(st.just("upsert"), rows, st.integers(1, 4)),
    # every column but c_big: its out-of-line values arrive as unchanged TOAST values
    st.tuples(st.just("touch"), st.integers(1, 5)),
    st.tuples(st.just("delete"), ids),
    st.tuples(st.just("rekey"), ids | st.none()),  # key changes (None: of every row): updates carrying the old key
    st.tuples(st.just("truncate"), rows),
)


def run(cur, t: str, statement) -> None:
    kind = statement[0]
    cols = ", ".join(NAMES)
    if kind == "upsert":
        _, values, copies = statement
        values = [(r[0] + 1000 * j, *r[1:]) for j in range(copies) for r in values]
        if values:
            casts = ", ".join(f"CAST(%s AS {t})" for _, t, _ in COLUMNS)
            psycopg2.extras.execute_values(
                cur, f"INSERT INTO {t} (id, {cols}) VALUES %s ON CONFLICT (id) DO UPDATE SET ({cols}) = ROW("
                f"{', '.join('EXCLUDED.' + c for c in NAMES)})", values, template=f"(%s, {casts})", page_size=10_000)
    elif kind == "touch":
        cur.execute(f"UPDATE {t} SET c_int2 = (coalesce(c_int2, 0) %% 1000) + 1, c_text = c_text || 'x' WHERE id %% %s = 0",
                    (statement[1],))
    elif kind == "delete":
        cur.execute(f"DELETE FROM {t} WHERE id = ANY(%s)", (statement[1],))
    elif kind == "rekey":
        # Rows with an out-of-line value keep it as unchanged TOAST in the new row: the replica
        # takes it from the old key's version (buffered, or in a delta of another partition).
        chosen = "" if statement[1] is None else " AND id = ANY(%s)"
        cur.execute(f"UPDATE {t} SET id = -id - 1 WHERE id >= 0{chosen}"
                    f" AND NOT EXISTS (SELECT 1 FROM {t} b WHERE b.id = -bulk.id - 1)", () if statement[1] is None else (statement[1],))
    else:
        cur.execute(f"TRUNCATE {t}")
        run(cur, t, ("upsert", statement[1], 2))


def replica(ws) -> list[tuple]:
    from htap.conf import load_config
    from htap.pushdown.replica_reader import read_plan
    from htap.replica.metadata import MetadataStore
    from htap.replica.read_plans import pin_and_plan
    from htap.rewrite.pushed import table_plan

    cfg = load_config(ws.config)
    store = MetadataStore(cfg.metadata)
    try:
        table = store.get_table(ws.source, ws.schema, "bulk")
        batches = []
        for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
            batches += read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan,
                                 table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema)
    finally:
        store.close()
    got = pa.Table.from_batches(batches, schema=table.arrow_schema).sort_by("id")
    return [tuple(r.values()) for r in got.to_pylist()]


def source(t: str) -> list[tuple]:
    conn = psycopg2.connect(pg_dsn(), options=SESSION_SETTINGS)  # the service's text formats
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(SELECTED)} FROM {t} ORDER BY id")
            return cur.fetchall()
    finally:
        conn.close()


def same(a, b, typ: str) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, typ) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if typ == "real":
            a, b = (struct.unpack("<f", struct.pack("<f", v))[0] for v in (a, b))
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(b, memoryview):
        b = bytes(b)
    return a == b


def test_bulk_changes_of_every_kind_reach_the_replica_exactly(workspace):
    ws = workspace
    t = f"{ws.schema}.bulk"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, {', '.join(f'{c} {t}' for c, t, _ in COLUMNS)})")
    ws.sql(f"ALTER TABLE {t} ALTER COLUMN c_big SET STORAGE EXTERNAL")  # long values out of line: TOAST
    ws.sql(f"INSERT INTO {t} (id, c_text, c_big) SELECT g, 'copied ' || g, repeat('c', 2500) FROM generate_series(0, 80) g")
    tune(ws, partition_rows=20)  # several partitions: a moved row's old key is often in another one
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("bulk")
    conn = psycopg2.connect(pg_dsn())
    types = ["int"] + [t for _, t, _ in COLUMNS]

    def compare():
        ws.wait_caught_up("bulk")
        got, want = replica(ws), source(t)
        assert [r[0] for r in got] == [r[0] for r in want]
        for g, w in zip(got, want):
            for name, typ, x, y in zip(["id", *NAMES], types, g, w):
                assert same(x, y, typ), f"row {w[0]} column {name} ({typ}): replica {x!r}, Postgres {y!r}"

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(statements, min_size=1, max_size=4), st.booleans())
    def check(script, one_transaction):
        conn.rollback()  # what a failed example left open
        conn.autocommit = not one_transaction
        with conn.cursor() as cur:
            for statement in script:
                run(cur, t, statement)
        if one_transaction:
            conn.commit()
        compare()

    try:
        # First for sure: copied rows (c_big out of line) moved to other keys, their old keys only
        # in the copy's delta; then in one transaction with a partial update before the move.
        with conn.cursor() as cur:
            run(cur, t, ("rekey", list(range(0, 81, 4))))
        conn.commit()
        compare()
        with conn.cursor() as cur:
            run(cur, t, ("touch", 2))
            run(cur, t, ("rekey", list(range(2, 81, 4))))
        conn.commit()
        compare()
        assert "key-changing partial updates completed from their old keys" in ws.log()
        check()
    finally:
        conn.close()
    assert "Traceback" not in ws.log()


def test_the_stream_decodes_runs_of_row_changes_as_batches(pg):
    """The events a bulk transaction becomes: batches for runs of like row changes, RowChanges for
    key changes; expanded row by row they are exactly the transaction's changes."""
    from htap.conf import PostgresConfig
    from htap.connectors.changes import Begin, Commit, RowBatch, RowChange
    from htap.connectors.postgres import PostgresStream

    name = f"bulk_{uuid.uuid4().hex[:10]}"
    t = f"public.{name}"
    with pg.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int)")
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE {t}")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        cur.execute(f"INSERT INTO {t} SELECT g, 'v' || g, CASE WHEN g % 3 > 0 THEN g END FROM generate_series(1, 500) g")
        cur.execute(f"UPDATE {t} SET n = coalesce(n, 0) + 1")
        cur.execute(f"UPDATE {t} SET id = id + 10000 WHERE id <= 3")
        cur.execute(f"DELETE FROM {t} WHERE id > 200 AND id < 10000")
    want = [
        sorted(("upsert", (str(g), f"v{g}", str(g) if g % 3 else None), None) for g in range(1, 501)),
        sorted(("upsert", (str(g), f"v{g}", str(g + 1) if g % 3 else "1"), None) for g in range(1, 501)),
        sorted(("upsert", (str(g + 10000), f"v{g}", str(g + 1) if g % 3 else "1"), (str(g), None, None)) for g in (1, 2, 3)),
        sorted(("delete", (str(g), None, None), None) for g in range(201, 501)),
    ]
    stream = PostgresStream(PostgresConfig(name=name, dsn=pg_dsn(), slot=name, publication=name), 0)
    got, batches = [], []
    try:
        deadline = time.monotonic() + 120
        while len(got) < len(want) and time.monotonic() < deadline:
            event = stream.poll(1.0)
            if isinstance(event, Begin):
                rows = []
            elif isinstance(event, RowChange):
                rows.append((event.op, tuple(event.values), None if event.old is None else tuple(event.old)))
            elif isinstance(event, RowBatch):
                batches.append((event.op, len(event)))
                values = [c.to_pylist() for c in event.columns]
                rows += [(event.op, tuple(r), None) for r in zip(*values)]
            elif isinstance(event, Commit):
                got.append(sorted(rows))
    finally:
        stream.close()
        with pg.cursor() as cur:
            wait_slot_released(cur, name)
            cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            cur.execute(f"DROP PUBLICATION {name}")
            cur.execute(f"DROP TABLE {t}")
    assert got == want
    assert {op for op, _ in batches} == {"upsert", "delete"}
    assert sum(n for op, n in batches if op == "upsert") > 500  # most rows went in batches
