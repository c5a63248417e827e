"""Issue 11: every legal Postgres value has a defined fate. A table with every type the docs'
Types reference lists and their special values (NaN, +-Infinity, -0.0, infinite and BC dates, arrays with
NULLs, quotes and bounds), copied and streamed, reads through Spark (route=replica) equal to
Postgres value by value — with the documented mappings applied on the Postgres side; a type no
replica type holds is refused at `tables add`, naming the column and the way out.

Dates and timestamps are compared as unix_date()/unix_micros() (Python's datetime has no year 0
or below, nor above 9999), floats by their bits."""

from __future__ import annotations

import math
import struct

import psycopg2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htap.connectors.pgtypes import SESSION_SETTINGS, decode_text_column

from services import pg_dsn

INF = ("'infinity'", "'-infinity'")

# (column, Postgres type, SQL literals: one per row, cycled; NULL is added as a row of its own)
COLUMNS = [
    ("c_int2", "smallint", ["-32768", "32767", "0"]),
    ("c_int4", "integer", ["-2147483648", "2147483647", "7"]),
    ("c_int8", "bigint", ["-9223372036854775808", "9223372036854775807", "0"]),
    ("c_real", "real", ["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "'1.17549435e-38'", "'3.4028235e38'", "'0.1'", "'1e-45'"]),
    ("c_double", "double precision", ["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "'5e-324'", "'1.7976931348623157e308'", "'0.1'", "'2.2250738585072014e-308'"]),
    ("c_numeric", "numeric(38,10)", ["'NaN'", "'9999999999999999999999999999.9999999999'", "'-9999999999999999999999999999.9999999999'", "'0.0000000001'", "'-0'", "'1.5'"]),
    ("c_numeric0", "numeric(5,0)", ["99999", "-99999", "'NaN'", "0"]),
    ("c_text", "text", ["E'multi\\nline\\r\\ntext'", "E'quote \" and \\\\ backslash, comma'", "''", "E'tab\\there'", "'unicode ✓ 日本'", "'NULL'", "'{braces}'"]),
    ("c_varchar", "varchar(20)", ["'a,b'", "E'x\\ny'", "''", "'  spaces  '"]),
    ("c_char", "char(5)", ["'ab'", "''", "'abcde'"]),
    ("c_uuid", "uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"]),
    ("c_json", "json", ["'{\"a\": [1, 2.50, \"x\\\\ny\"]}'", "'[]'", "'null'"]),
    ("c_jsonb", "jsonb", ["'{\"b\": 1, \"a\": {\"c\": null}}'", "'\"str\"'"]),
    ("c_time", "time", ["'00:00:00'", "'23:59:59.999999'", "'24:00:00'"]),
    ("c_timetz", "time with time zone", ["'12:00:00+05:30'"]),
    ("c_interval", "interval", ["'1 year 2 months 3 days 04:05:06.789'", "'-1 day'", "'0'"]),
    ("c_inet", "inet", ["'192.168.0.1/24'", "'::1'"]),
    ("c_cidr", "cidr", ["'10.0.0.0/8'"]),
    ("c_macaddr", "macaddr", ["'08:00:2b:01:02:03'"]),
    ("c_bool", "boolean", ["true", "false"]),
    ("c_date", "date", [*INF, "'0044-03-15 BC'", "'0001-01-01 BC'", "'4713-01-01 BC'", "'10000-01-01'", "'5874897-12-31'", "'0001-01-01'", "'2024-02-29'", "'9999-12-31'"]),
    ("c_ts", "timestamp", [*INF, "'0044-03-15 12:34:56.789 BC'", "'12345-06-07 01:02:03.000001'", "'2024-02-29 23:59:59.999999'", "'1970-01-01 00:00:00'", "'294246-12-31 23:59:59.999999'"]),
    ("c_tstz", "timestamptz", [*INF, "'0044-03-15 12:34:56.789+00 BC'", "'2024-02-29 23:59:59.5+07'", "'12345-06-07 01:02:03+00'"]),
    ("c_ts3", "timestamp(3)", ["'2020-01-01 00:00:00.123'"]),
    ("c_bytea", "bytea", ["'\\x00ff10'::bytea", "''::bytea", "convert_to(E'a\\nb', 'UTF8')"]),
    ("c_int_arr", "int[]", ["'{1,NULL,3}'", "'{}'", "'[0:2]={7,8,9}'", "ARRAY[2147483647]"]),
    ("c_text_arr", "text[]", ["ARRAY['a', 'b c', E'x\"y\\\\z', NULL, 'NULL', '', 'a,b', '{}', E'line\\nbreak']", "'{}'"]),
    ("c_float_arr", "float8[]", ["'{NaN,Infinity,-Infinity,-0,1.5}'", "ARRAY[5e-324]::float8[]"]),
    ("c_numeric_arr", "numeric(10,2)[]", ["'{NaN,1.50,-2,NULL}'"]),
    ("c_date_arr", "date[]", ["'{infinity,-infinity,\"0044-03-15 BC\",2024-02-29}'"]),
    ("c_tstz_arr", "timestamptz[]", ["ARRAY['infinity', '2020-01-01 00:00:00.5+00', '0001-01-01 00:00:00+00 BC']::timestamptz[]"]),
    ("c_bool_arr", "boolean[]", ["'{t,f,NULL}'"]),
    ("c_bytea_arr", "bytea[]", ["ARRAY['\\x0102'::bytea, NULL]"]),
    # Overridden at `tables add`: unconstrained numeric as its exact text and as a double.
    ("c_num_text", "numeric", ["'NaN'", "'Infinity'", "'-Infinity'", "'123456789012345678901234567890.123456789012345678901234567890'", "'1e-100'"]),
    ("c_num_double", "numeric", ["'NaN'", "'Infinity'", "'-Infinity'", "'0.1'", "'1e300'"]),
]
OVERRIDES = {"c_num_text": "string", "c_num_double": "double"}
ROWS = max(len(values) for _, _, values in COLUMNS)


def insert_rows(ws, table: str, first_id: int) -> None:
    names = ", ".join(name for name, _, _ in COLUMNS)
    for i in range(ROWS):
        values = ", ".join(f"({vals[i % len(vals)]})::{typ}" for _, typ, vals in COLUMNS)
        ws.sql(f"INSERT INTO {table} (id, {names}) VALUES ({first_id + i}, {values})")
    ws.sql(f"INSERT INTO {table} (id) VALUES ({first_id + ROWS})")  # every column NULL


def _fate(col: str, typ: str) -> str:
    """Postgres SQL for what Spark must return for a column (see the docs' Types reference)."""
    c = col
    days = "({x} - DATE '1970-01-01')"
    micros = "(extract(epoch FROM {x}) * 1000000)::bigint"
    if typ == "date":
        return f"CASE WHEN {c} = 'infinity' THEN 2932896 WHEN {c} = '-infinity' THEN -719162 ELSE {days.format(x=c)} END"
    if typ.startswith("timestamp") and not typ.endswith("[]"):
        return (f"CASE WHEN {c} = 'infinity' THEN 253402300799999999 WHEN {c} = '-infinity' THEN -62135596800000000 "
                f"ELSE {micros.format(x=c)} END")
    if typ.startswith("numeric(") and not typ.endswith("[]"):
        return f"NULLIF({c}, 'NaN')"
    if typ.endswith("[]"):
        return f"CASE WHEN {c} IS NOT NULL THEN coalesce({_elements(c, typ)}, '{{}}') END"
    if col in OVERRIDES and OVERRIDES[col] == "string" or typ in (
            "json", "jsonb", "time", "time with time zone", "interval", "inet", "cidr", "macaddr", "uuid"):
        return f"CASE WHEN {c} IS NOT NULL THEN concat({c}) END"  # the type's output function
    if col in OVERRIDES:
        return f"{c}::float8"
    return c


def _elements(c: str, typ: str) -> str:
    """The array's elements (its lower bound dropped), each with its element type's fate."""
    days = "({x} - DATE '1970-01-01')"
    micros = "(extract(epoch FROM {x}) * 1000000)::bigint"
    if typ == "date[]":
        return (f"(SELECT array_agg(CASE WHEN x = 'infinity' THEN 2932896 WHEN x = '-infinity' THEN -719162 "
                f"ELSE {days.format(x='x')} END ORDER BY o) FROM unnest({c}) WITH ORDINALITY u(x, o))")
    if typ == "timestamptz[]":
        return (f"(SELECT array_agg(CASE WHEN x = 'infinity' THEN 253402300799999999 WHEN x = '-infinity' "
                f"THEN -62135596800000000 ELSE {micros.format(x='x')} END ORDER BY o) FROM unnest({c}) WITH ORDINALITY u(x, o))")
    if typ == "numeric(10,2)[]":
        return f"(SELECT array_agg(NULLIF(x, 'NaN') ORDER BY o) FROM unnest({c}) WITH ORDINALITY u(x, o))"
    return f"(SELECT array_agg(x ORDER BY o) FROM unnest({c}) WITH ORDINALITY u(x, o))"


def _spark(col: str, typ: str) -> str:
    if typ == "date":
        return f"unix_date({col})"
    if typ in ("timestamp", "timestamp(3)"):
        return f"unix_micros(CAST({col} AS TIMESTAMP))"
    if typ == "timestamptz":
        return f"unix_micros({col})"
    if typ == "date[]":
        return f"transform({col}, x -> unix_date(x))"
    if typ == "timestamptz[]":
        return f"transform({col}, x -> unix_micros(x))"
    return col


def _same(a, b, typ: str) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, typ) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if typ.startswith("real"):
            a, b = (struct.unpack("<f", struct.pack("<f", v))[0] for v in (a, b))
        return struct.pack("<d", a) == struct.pack("<d", b)  # NaN and -0.0 exactly
    if isinstance(a, memoryview | bytearray):
        a = bytes(a)
    if isinstance(b, memoryview | bytearray):
        b = bytes(b)
    return a == b


def assert_equal(ws, spark, catalog, table: str) -> None:
    spark_rows = spark.sql(
        f"SELECT id, {', '.join(_spark(c, t) for c, t, _ in COLUMNS)} FROM {catalog}.{table} ORDER BY id"
    ).collect()
    conn = psycopg2.connect(pg_dsn(), options=SESSION_SETTINGS)  # the service's text formats (interval...)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(_fate(c, t) for c, t, _ in COLUMNS)} FROM {table} ORDER BY id")
            pg_rows = cur.fetchall()
    finally:
        conn.close()
    assert [r[0] for r in spark_rows] == [r[0] for r in pg_rows]
    for srow, prow in zip(spark_rows, pg_rows):
        for (col, typ, _), got, want in zip(COLUMNS, list(srow)[1:], prow[1:]):
            assert _same(got, want, typ), f"row {srow[0]} column {col} ({typ}): Spark {got!r}, Postgres {want!r}"


def test_every_postgres_type_copied_and_streamed(workspace, spark, catalog):
    ws = workspace
    t = f"{ws.schema}.every_type"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, {', '.join(f'{c} {typ}' for c, typ, _ in COLUMNS)})")
    insert_rows(ws, t, 1)  # before the copy

    # numeric without a precision has no replica type holding all its values: refused, naming the way out.
    r = ws.htap("tables", "add", t, check=False)
    assert r.returncode == 2
    assert "column c_num_text: type 'numeric' is not supported" in r.stderr
    assert "--column-type c_num_text=<string" in r.stderr
    ws.htap("tables", "add", t, *[a for col, kind in OVERRIDES.items() for a in ("--column-type", f"{col}={kind}")])
    ws.start_service()
    ws.wait_readable("every_type")
    insert_rows(ws, t, 1000)  # through the change stream
    ws.sql(f"UPDATE {t} SET c_double = '-0', c_real = '-0', c_text = E'up\\ndated' WHERE id = 2")
    ws.wait_caught_up("every_type")
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "replica")
    assert_equal(ws, spark, catalog, t)

    # After compaction (streamed deltas merged into the copy's) nothing changes either.
    from htap.conf import load_config
    from htap.replica.compaction import Policy, compact_table

    store = ws.store()
    cfg = load_config(ws.config)
    while compact_table(cfg, store, ws.table("every_type"), Policy(min_bytes=1 << 40, ratio=2, max_deltas=1)):
        pass
    store.close()
    assert_equal(ws, spark, catalog, t)

    # The source route (failover) gives the same values, the same filters and aggregates.
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "source")
    assert_equal(ws, spark, catalog, t)
    q = (f"SELECT count(*), count(c_numeric), max(c_date), min(c_ts) FROM {catalog}.{t} "
         f"WHERE c_date > DATE '2000-01-01' OR c_numeric > 1")
    via_source = spark.sql(q.replace("max(c_date), min(c_ts)", "max(unix_date(c_date)), min(unix_micros(CAST(c_ts AS TIMESTAMP)))")).collect()
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "replica")
    via_replica = spark.sql(q.replace("max(c_date), min(c_ts)", "max(unix_date(c_date)), min(unix_micros(CAST(c_ts AS TIMESTAMP)))")).collect()
    assert via_source == via_replica


def test_types_without_a_replica_type_are_refused_naming_the_column(workspace):
    ws = workspace
    for name, typ in (("big", "numeric(50,2)"), ("free", "numeric"), ("geo", "point"), ("nums", "numeric[]")):
        ws.sql(f"CREATE TABLE {ws.schema}.{name} (id int PRIMARY KEY, v {typ})")
        r = ws.htap("tables", "add", f"{ws.schema}.{name}", check=False)
        assert r.returncode == 2 and f"cannot add {ws.schema}.{name}: column v" in r.stderr, r.stderr
        assert "--column-type v=" in r.stderr, r.stderr
    r = ws.htap("tables", "add", f"{ws.schema}.big", "--column-type", "v=decimal(40,2)", check=False)
    assert r.returncode == 2 and "decimal(p,s) with p <= 38" in r.stderr
    r = ws.htap("tables", "add", f"{ws.schema}.big", "--column-type", "nope=string", check=False)
    assert r.returncode == 2 and "has no column nope" in r.stderr
    ws.htap("tables", "add", f"{ws.schema}.geo", "--column-type", "v=string")


# --- the decoder itself, against Postgres' own text output (property tests) ---------------------


@pytest.fixture(scope="module")
def pg_text():
    conn = psycopg2.connect(pg_dsn(), options=SESSION_SETTINGS)
    conn.autocommit = True
    yield conn
    conn.close()


floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-0.0, 0.0, math.nan, math.inf, -math.inf, 5e-324])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(values=st.lists(floats, min_size=1, max_size=40))
def test_float_text_round_trips_exactly(pg_text, values):
    import pyarrow as pa

    spelled = ["NaN" if math.isnan(v) else "Infinity" if v == math.inf else "-Infinity" if v == -math.inf else repr(v)
               for v in values]  # as text: a Python float parameter would travel as a numeric (no -0)
    with pg_text.cursor() as cur:
        cur.execute("SELECT v::float8::text FROM unnest(%s::text[]) WITH ORDINALITY u(v, o) ORDER BY o", (spelled,))
        texts = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT %s::text[]::float8[]::text", (spelled,))
        (array_text,) = cur.fetchone()
    def bits(v: float) -> bytes:  # every NaN is one NaN to SQL (Postgres prints all of them as 'NaN')
        return b"nan" if math.isnan(v) else struct.pack("<d", v)

    got = decode_text_column(pa.array(texts), pa.float64()).to_pylist()
    assert [bits(v) for v in got] == [bits(v) for v in values]
    (as_array,) = decode_text_column(pa.array([array_text]), pa.list_(pa.float64())).to_pylist()
    assert [bits(v) for v in as_array] == [bits(v) for v in values]


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(values=st.lists(st.none() | texts | st.sampled_from(["NULL", "", "a,b", '"', "\\", "{}", " x ", "\n"]), max_size=20))
def test_text_array_text_round_trips_exactly(pg_text, values):
    import pyarrow as pa

    with pg_text.cursor() as cur:
        cur.execute("SELECT %s::text[]::text", (values,))
        (array_text,) = cur.fetchone()
    (got,) = decode_text_column(pa.array([array_text]), pa.list_(pa.string())).to_pylist()
    assert got == values
