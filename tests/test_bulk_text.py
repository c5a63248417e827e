"""Issue 11: tables larger than 16 MiB of multi-line text (also as the primary key) are copied,
streamed and read through the source route with exact row counts and values. (The copy used to
parse CSV in 16 MiB blocks without newlines in values: rows split or failed.)"""

from __future__ import annotations

import random

ROWS = 30_000


def nasty_text(rng: random.Random, n: int) -> str:
    pieces = ["\n", "\r\n", '"', "'", "\\", ",", "\t", "é", "日本", "\\N", "NULL", " ", "{", "}", "\u2028"]
    return "".join(rng.choice(pieces) if rng.random() < 0.3 else rng.choice("abcxyz0123") for _ in range(n))


def fill(ws, table: str, first: int, rng: random.Random, key_is_text: bool) -> None:
    rows = []
    for i in range(first, first + ROWS):
        body = f"row {i}\nline two, \"quoted\"\\\n" + nasty_text(rng, 560)
        rows.append((f"key {i}\n{body[:200]}", i) if key_is_text else (i, body))
    with ws.pg.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", rows[:100])  # a few one by one
        args = ",".join(cur.mogrify("(%s, %s)", r).decode() for r in rows[100:])
        cur.execute(f"INSERT INTO {table} VALUES {args}")


def check(ws, spark, catalog, table: str) -> None:
    want = ws.sql(f"SELECT * FROM {table}")
    got = [tuple(r) for r in spark.sql(f"SELECT * FROM {catalog}.{table}").collect()]
    got.sort(key=repr)
    want.sort(key=repr)
    assert len(got) == len(want)
    assert got == want
    (n,) = spark.sql(f"SELECT count(*) FROM {catalog}.{table}").collect()[0]
    assert n == len(want)


def test_multiline_text_beyond_16_mib_copy_stream_and_source_reads(workspace, spark, catalog):
    ws = workspace
    rng = random.Random(11)
    docs, keyed = f"{ws.schema}.docs", f"{ws.schema}.keyed"
    ws.sql(f"CREATE TABLE {docs} (id int PRIMARY KEY, body text NOT NULL)")
    ws.sql(f"CREATE TABLE {keyed} (k text PRIMARY KEY, n int)")
    fill(ws, docs, 1, rng, key_is_text=False)
    fill(ws, keyed, 1, rng, key_is_text=True)
    (text_bytes,) = ws.sql(f"SELECT sum(octet_length(body)) FROM {docs}")[0]
    assert text_bytes > 16 << 20, text_bytes

    ws.htap("tables", "add", docs)
    ws.htap("tables", "add", keyed)
    ws.start_service()
    ws.wait_readable("docs")
    ws.wait_readable("keyed")
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "replica")
    check(ws, spark, catalog, docs)
    check(ws, spark, catalog, keyed)

    # As many rows again through the change stream, plus updates and deletes of text keys.
    fill(ws, docs, ROWS + 1, rng, key_is_text=False)
    fill(ws, keyed, ROWS + 1, rng, key_is_text=True)
    ws.sql(f"UPDATE {docs} SET body = body || E'\\nappended \"\\\\' WHERE id % 7 = 0")
    ws.sql(f"UPDATE {keyed} SET k = k || E'\\nrenamed' WHERE n % 11 = 0")
    ws.sql(f"DELETE FROM {keyed} WHERE n % 13 = 0")
    ws.wait_caught_up("docs")
    ws.wait_caught_up("keyed")
    check(ws, spark, catalog, docs)
    check(ws, spark, catalog, keyed)

    # The source route reads the same rows (binary COPY: nothing split, nothing merged).
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "source")
    check(ws, spark, catalog, docs)
    check(ws, spark, catalog, keyed)
    (n,) = spark.sql(f"SELECT count(*) FROM {catalog}.{docs} WHERE body LIKE '%appended%'").collect()[0]
    assert n == ws.sql(f"SELECT count(*) FROM {docs} WHERE body LIKE '%appended%'")[0][0]
    spark.conf.set(f"spark.sql.catalog.{catalog}.route", "replica")
