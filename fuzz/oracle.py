"""The oracle: plain Spark over a Parquet copy of the same rows, read from Postgres with psycopg2
independently of spark-htap (no code of the product on this path).

The copy is read in one REPEATABLE READ transaction (one snapshot for all tables) after the last
change batch has reached the replica, so it holds exactly the rows the replica holds. Postgres
values without a Spark counterpart get spark-htap's documented fate (docs: Types reference): numeric NaN
-> NULL, 'infinity' dates and timestamps -> 9999-12-31 (23:59:59.999999), '-infinity' ->
0001-01-01. Each table is registered in Spark's session catalog with the Spark types the HTAP
catalog exposes, except that char(n) is Spark's CHAR(n): the intended semantics (read-side
padding, padded comparisons), which Spark's own JDBC source gives.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fuzz.schema import Column, Schema
from fuzz.source import connect


@dataclass(frozen=True)
class Oracle:
    database: str
    refs: dict[str, str]  # table name -> Spark name (`database`.`table`)
    rows: dict[str, int]
    # The same rows in other physical orders (ORDERS: reversed and in two files; sorted by the
    # floating point columns, ascending and descending, in one), in `database`_<order>: a query whose
    # plain-Spark answer changes with the order of the rows is one Spark itself answers
    # nondeterministically (a LIMIT over rows whose order its optimizer lost; a DOUBLE sum that
    # overflows to +Infinity before it meets -Infinity on one order only), and no comparison
    # with it says anything.
    reordered_refs: tuple[dict[str, str], ...]

    def drop(self, spark) -> None:
        for db in (self.database, *(f"{self.database}_{order}" for order in ORDERS)):
            spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


ORDERS = ("reversed", "floats_ascending", "floats_descending")


def _select(c: Column) -> str:
    """Postgres SQL giving column `c`'s value as spark-htap documents it."""
    kind, name = c.type.kind, c.name
    if kind == "decimal":
        return f"NULLIF({name}, 'NaN')"
    ends = {"date": ("9999-12-31", "0001-01-01"),
            "timestamp_ntz": ("9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"),
            "timestamp": ("9999-12-31 23:59:59.999999+00", "0001-01-01 00:00:00+00")}.get(kind)
    if ends:
        pg = c.type.pg
        return (f"CASE WHEN {name} = 'infinity' THEN '{ends[0]}'::{pg} WHEN {name} = '-infinity' "
                f"THEN '{ends[1]}'::{pg} ELSE {name} END")
    return name


def read(dsn: str, pg_schema: str, schema: Schema) -> dict[str, pa.Table]:
    """Every table's current rows as Arrow tables with explicit types, at one snapshot."""
    conn = connect(dsn)
    conn.autocommit = False
    out = {}
    try:
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for t in schema.tables:
                cur.execute(f"SELECT {', '.join(_select(c) for c in t.columns)} FROM {pg_schema}.{t.name}")
                columns = list(zip(*cur.fetchall())) or [()] * len(t.columns)
                out[t.name] = pa.table(
                    [pa.array(list(vals), type=c.type.arrow) for c, vals in zip(t.columns, columns)],
                    schema=pa.schema([pa.field(c.name, c.type.arrow, nullable=not c.key) for c in t.columns]),
                )
        conn.rollback()
    finally:
        conn.close()
    return out


def build(spark, dsn: str, pg_schema: str, schema: Schema, out_dir: Path, database: str) -> Oracle:
    """Write the Parquet copies under `out_dir` and register them as `database`.<table> and
    `database`_<order>.<table> in Spark's session catalog (databases dropped and created afresh)."""
    tables = read(dsn, pg_schema, schema)
    root = Path(out_dir).resolve()
    refs = _register(spark, schema, tables, root / "ordered", database, None)
    reordered = tuple(_register(spark, schema, tables, root / order, f"{database}_{order}", order) for order in ORDERS)
    return Oracle(database, refs, {name: tbl.num_rows for name, tbl in tables.items()}, reordered)


def _reorder(rows: pa.Table, order: str) -> pa.Table:
    """`rows` in one of ORDERS (a table without floating point columns: reversed)."""
    floats = [f.name for f in rows.schema if pa.types.is_floating(f.type)]
    if order == "reversed" or not floats:
        return rows.take(list(range(rows.num_rows - 1, -1, -1)))
    direction = "ascending" if order == "floats_ascending" else "descending"
    return rows.take(pc.sort_indices(rows, sort_keys=[(f, direction) for f in floats]))


def _register(spark, schema: Schema, tables: dict[str, pa.Table], out_dir: Path, database: str,
              order: str | None) -> dict[str, str]:
    """One copy: a Parquet folder per table (the rows as read, or in `order`; reversed, split in
    two files, so Spark reads them in two partitions), registered as `database`.<table>."""
    spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    spark.sql(f"CREATE DATABASE {database} LOCATION '{out_dir / (database + '.db')}'")
    refs = {}
    for t in schema.tables:
        folder = out_dir / t.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        rows = tables[t.name]
        parts = [rows if order is None else _reorder(rows, order)]
        if order == "reversed":  # and in two partitions
            half = rows.num_rows // 2
            parts = [parts[0].slice(0, half), parts[0].slice(half)]
        for i, part in enumerate(parts):
            pq.write_table(part, folder / f"part-{i}.parquet")
        cols = ", ".join(f"{c.name} {c.type.spark}" for c in t.columns)
        refs[t.name] = f"{database}.{t.name}"
        spark.sql(f"CREATE TABLE {refs[t.name]} ({cols}) USING parquet LOCATION '{folder}'")
    return refs


def type_differences(spark, schema: Schema, htap_refs: dict[str, str], oracle: Oracle) -> list[str]:
    """Columns whose Spark type in the HTAP catalog differs from the oracle's (expected today:
    char(n), exposed as STRING)."""
    def types(ref: str) -> dict[str, str]:
        # Spark keeps CHAR(n) / VARCHAR(n) as STRING with the declared type in the field's metadata
        return {f.name: f.metadata.get("__CHAR_VARCHAR_TYPE_STRING") or f.dataType.simpleString()
                for f in spark.table(ref).schema.fields}

    out = []
    for t in schema.tables:
        got, want = types(htap_refs[t.name]), types(oracle.refs[t.name])
        out += [f"{t.name}.{c}: catalog {got.get(c)} vs oracle {w}" for c, w in want.items() if got.get(c) != w]
    return out
