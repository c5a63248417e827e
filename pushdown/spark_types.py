"""Arrow types of replica columns -> Spark SQL types (the schema Spark sees for an HTAP table)."""

from __future__ import annotations

import dataclasses
import re

import pyarrow as pa

from htap.errors import TableError
from htap.replica.models import KIND_TABLE


def spark_type(t: pa.DataType) -> str:
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "STRING"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz else "TIMESTAMP_NTZ"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BINARY"
    if pa.types.is_list(t):
        return f"ARRAY<{spark_type(t.value_type)}>"
    raise TableError(f"Arrow type {t} has no Spark mapping")


STATS_COMMENT = "htap.stats:"  # keep in sync with HtapCatalog.java


_CHAR = re.compile(r"^\s*(character|char|bpchar)\s*\(\s*(\d+)\s*\)\s*$", re.IGNORECASE)


def char_lengths(columns) -> dict[str, int]:
    """The fixed-length string columns (Postgres `char(n)` / `character(n)`, MySQL `char(n)`, not
    overridden) and their length n: Spark sees them as CHAR(n), so that comparisons with them
    answer as Spark's CHAR(n) does (the shorter side padded with spaces), as the source's own
    comparisons and Spark's JDBC source do."""
    out = {}
    for c in columns:
        m = _CHAR.match(c.source_type or "")
        if m and not c.override and 0 < int(m.group(2)) <= 255:
            out[c.name] = int(m.group(2))
    return out


def spark_ddl(schema: pa.Schema, stats: tuple[int, ...] | None = None, chars: dict[str, int] | None = None) -> str:
    """A Spark DDL string for the schema; every column nullable (Spark only trusts the reader);
    `chars`: string columns of a fixed length (`char_lengths`), as CHAR(n).

    `stats` (row versions, bytes of the live deltas, and when known the partitions and the position of the partition
    column, the first key column, in `schema`) ride on the first column's comment: the
    shim takes them off again (HtapCatalog) and reports them to Spark's optimizer
    (SupportsReportStatistics), without another round trip to Python."""
    chars = chars or {}
    columns = [
        f"`{f.name.replace('`', '``')}` " + (f"CHAR({chars[f.name]})" if f.name in chars and pa.types.is_string(f.type)
                                             else spark_type(f.type))
        for f in schema
    ]
    if stats is not None and columns:
        parts = f";parts={int(stats[2])}" if len(stats) > 2 else ""
        key = f";key={int(stats[3])}" if len(stats) > 3 else ""
        columns[0] += f" COMMENT '{STATS_COMMENT}rows={int(stats[0])};bytes={int(stats[1])}{parts}{key}'"
    return ", ".join(columns)


def table_ddl(store, source: str, schema: str, table: str) -> str:
    """The DDL Spark sees for an HTAP table (or a system table), statistics on its first column:
    what HtapDataSource.schema asks for. `store` is an open htap.replica.metadata.MetadataStore;
    a missing table raises NoSuchTableError."""
    return table_answer(store, source, schema, table, with_columns=False)["ddl"]


def table_answer(store, source: str, schema: str, table: str, with_columns: bool = True,
                 travel: "TimeTravel | None" = None) -> dict:
    """What the catalog's loadTable asks the driver's bridge process for (one metadata read, no
    Python worker per table and query): the table's DDL, statistics on its first column, and
    (`columns`) its column statistics by name as [low, high, nulls, distinct]
    (htap.replica.column_stats; none for system tables), and the views ViewRewrite may read
    instead (`views`; for a `FOR VERSION|TIMESTAMP AS OF` read, `travel`: those that hold the
    seq it reads, which `views_at` names)."""
    from htap.pushdown.system_tables import SCHEMAS, is_system_table
    from htap.replica import column_stats
    from htap.replica.partitions import decode_bounds, partition_count

    if is_system_table(schema, table):
        return {"ddl": spark_ddl(SCHEMAS[table])}
    info = store.get_table(source, schema, table)
    seen = store.delta_stats(info.id)
    parts = partition_count(decode_bounds(info.partition_bounds_b64))
    stats = (seen[1], seen[2], parts, info.arrow_schema.names.index(info.key[0]))
    answer: dict = {"ddl": spark_ddl(info.arrow_schema, stats, char_lengths(info.columns))}
    if with_columns:
        answer["columns"] = {c: s.as_list() for c, s in column_stats.of_table(store, info, seen).items()}
        if travel is None:
            answer["views"] = rewrite_views(store, info)
        else:
            answer["views_at"] = at = travel.seq(store, info)
            answer["views"] = [] if at is None else rewrite_views(store, info, at, travel.window_s)
    return answer


@dataclasses.dataclass(frozen=True)
class TimeTravel:
    """A `FOR VERSION AS OF` (`version`: a seq as typed) or `FOR TIMESTAMP AS OF` (`time`: Unix
    seconds) read, as the catalog's loadTable is asked for it; `window_s`: the queryable window."""

    version: str | None
    time: float | None
    window_s: float

    def seq(self, store, table) -> int | None:
        """The seq the read is at, for views to answer it at — None when it is not fixed yet (a
        time no later checkpoint has passed) or not a seq (the scan then says what is wrong)."""
        from htap.errors import ConfigError
        from htap.seq import parse_seq

        if self.version is not None:
            try:
                return parse_seq(self.version)
            except ConfigError:
                return None
        return None if self.time is None else store.settled_seq_at(table.source, self.time)


def rewrite_views(store, base, at: int | None = None, window_s: float = 0.0) -> list[dict]:
    """The views of `base` a query over it may read instead (the ViewRewrite rule): built and
    readable, while the table's reads stay on the replica by its own settings (no failover, no
    staleness limit: a view has no source table to fall back to; a join view's dimensions
    alike). Each with what the rule
    matches on (its group columns, kept states and filter) and its row count (the smallest
    answering view wins).

    `at`: a time-travel read's seq. Then only views whose queryable window (`window_s`) holds
    it, and only when every table the view reads can be read there too: the view answers
    exactly the time travel the tables would, never one they would refuse. (A staleness limit
    does not apply to time travel.)"""
    from htap.replica.read_plans import queryable_window
    from htap.rewrite.views import DIMENSION_SEPARATOR, spark_aliases, spark_filter

    def holds(table) -> bool:
        window = queryable_window(store, table, window_s)
        return window is not None and window.min_seq <= at <= window.max_seq

    if base.kind != KIND_TABLE or base.failover or (base.max_staleness_s is not None and at is None):
        return []
    if at is not None and not holds(base):
        return []
    out = []
    for view in store.views_of(base.id):
        if not view.table.readable or view.table.failover or view.table.copy_seq is None:
            continue
        if at is not None and not holds(view.table):
            continue
        d = view.definition
        entry = {"name": view.name, "groups": list(d.groups), "filter": spark_filter(view.sql),
                 "since": view.table.copy_seq,
                 "states": [{"name": s.name, "fn": s.fn, "arg": s.arg} for s in d.states],
                 "rows": store.delta_stats(view.table.id)[1]}
        if d.dimensions:  # a join view: its tables by alias, its dimensions' columns named <alias>__<column>
            dimensions = [store.get_table(base.source, *x.table.split(".", 1)) for x in d.dimensions]
            if any(t.failover or (t.max_staleness_s is not None and at is None) for t in dimensions):
                continue  # (read from where their settings say, the join is not the view's)
            if at is not None and not all(holds(t) for t in dimensions):
                continue
            entry["tables"] = spark_aliases(view.sql)
            entry["separator"] = DIMENSION_SEPARATOR
        out.append(entry)
    return sorted(out, key=lambda v: v["rows"])
