"""The `htap` Python data source: Spark reads HTAP tables through it.

The Java catalog shim builds it with options naming the config, the table and the pushed
subplan (JSON from the shim's scan builder). Planning (on the driver) fixes the snapshot seq and
the delta files to read; executors then merge those deltas at that seq and run the subplan in
DuckDB, streaming Arrow record batches back to Spark.

Imports of our own modules sit inside the methods on purpose (PySpark's worker model): Spark
imports this module (through `pyspark_htap`) in every Python worker that merely looks data
sources up, so the module itself loads only pyspark; the readers, DuckDB, the metadata store
and the source drivers load in the worker that plans or reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from htap.errors import ConfigError, DamagedReplicaError, HtapError, NoSuchTableError
from htap.replica.snapshot import ReadPlan
from htap.seq import parse_seq

# Marker the Java shim looks for to turn a Python failure into Spark's NoSuchTableException.
NO_SUCH_TABLE_MARKER = "HTAP_NO_SUCH_TABLE"
# Marker the Java shim turns into a SecurityException (HtapBatch).
PERMISSION_MARKER = "HTAP_PERMISSION_DENIED"
# Marker of any other error of ours while planning a scan (routing, snapshot, metadata): the Java
# shim (HtapBatch) turns the line after it into Spark's IllegalArgumentException, so the Spark
# user sees one readable line, not a Python traceback.
ERROR_MARKER = "HTAP_ERROR"


class PlanningError(Exception):
    """An HtapError raised while planning a scan, as one marked line for the Java shim."""

    def __init__(self, error: HtapError):
        line = " ".join(str(error).split())
        super().__init__(f"{ERROR_MARKER}: {line}")

OPTION_CONFIG = "config"
OPTION_SOURCE = "source"
OPTION_TABLE = "table"
OPTION_PUSHED = "pushed"  # the pushed subplan, JSON (htap.rewrite.subplan)
OPTION_ROUTE = "route"  # auto | replica | source
OPTION_USER = "user"  # source user whose privileges every read must respect
OPTION_AS_OF_VERSION = "as_of_version"  # FOR VERSION AS OF: a seq (Postgres: LSN or integer)
OPTION_AS_OF_SEQ = "as_of_seq"  # the same, as a catalog option (e.g. for verification)
OPTION_AS_OF_TIME = "as_of_time"  # FOR TIMESTAMP AS OF: Unix seconds
OPTION_SOURCE_SNAPSHOT = "source_snapshot"  # an exported Postgres snapshot for source reads
OPTION_SNAPSHOT_TOKEN = "snapshot_token"  # set by the snapshot rule: scans of one query share it
OPTION_SNAPSHOT_TABLES = "snapshot_tables"  # the query's HTAP tables, catalog.schema.table, comma-separated
OPTIONS = (
    OPTION_CONFIG, OPTION_SOURCE, OPTION_TABLE, OPTION_PUSHED, OPTION_ROUTE, OPTION_USER,
    OPTION_AS_OF_VERSION, OPTION_AS_OF_SEQ, OPTION_AS_OF_TIME, OPTION_SOURCE_SNAPSHOT,
    OPTION_SNAPSHOT_TOKEN, OPTION_SNAPSHOT_TABLES,
)


@dataclass(frozen=True)
class ScanOptions:
    """The data source's string options, parsed once."""

    config: str | None
    source: str | None
    schema: str
    table: str
    pushed: str | None
    route: str = "auto"
    user: str | None = None
    as_of_seq: int | None = None
    as_of_time: float | None = None
    source_snapshot: str | None = None
    snapshot_token: str | None = None
    snapshot_tables: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ScanOptions":
        from htap.pushdown.routing import ROUTES

        opts = {k.lower(): v for k, v in options.items()}
        unknown = set(opts) - set(OPTIONS) - {"path"}
        if unknown:
            raise ConfigError(f"unknown htap data source option(s) {sorted(unknown)}; known: {', '.join(OPTIONS)}")
        qualified = opts.get(OPTION_TABLE)
        if not qualified or "." not in qualified:
            raise ConfigError("option `table` must name an HTAP table as <schema>.<table>")
        schema, table = qualified.split(".", 1)
        route = opts.get(OPTION_ROUTE, "auto").lower()
        if route not in ROUTES:
            raise ConfigError(f"catalog option route={route!r}: use one of {', '.join(ROUTES)}")
        version = opts.get(OPTION_AS_OF_VERSION) or opts.get(OPTION_AS_OF_SEQ)
        try:
            as_of_time = float(opts[OPTION_AS_OF_TIME]) if opts.get(OPTION_AS_OF_TIME) else None
        except ValueError as e:
            raise ConfigError(f"TIMESTAMP AS OF: {e}") from e
        return cls(
            config=opts.get(OPTION_CONFIG),
            source=opts.get(OPTION_SOURCE),
            schema=schema,
            table=table,
            pushed=opts.get(OPTION_PUSHED),
            route=route,
            user=opts.get(OPTION_USER),
            as_of_seq=parse_seq(version) if version else None,
            as_of_time=as_of_time,
            source_snapshot=opts.get(OPTION_SOURCE_SNAPSHOT),
            snapshot_token=opts.get(OPTION_SNAPSHOT_TOKEN),
            snapshot_tables=tuple(t for t in opts.get(OPTION_SNAPSHOT_TABLES, "").split(",") if t),
        )


def _open(opts: ScanOptions):
    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    cfg = load_config(opts.config)
    source = cfg.source(opts.source)
    store = MetadataStore(cfg.metadata)
    try:
        table = store.get_table(source.name, opts.schema, opts.table)
    except NoSuchTableError as e:
        store.close()
        raise NoSuchTableError(f"{NO_SUCH_TABLE_MARKER}: {e}") from e
    return cfg, store, table


@dataclass(frozen=True)
class ReplicaPartition(InputPartition):
    """Everything an executor needs to read one partition at the query's snapshot."""

    config: str
    table_id: int
    warehouse: str
    table_label: str
    table_schema_b64: str
    key: tuple[str, ...]
    plan: "ReadPlan"
    pushed: str | None


@dataclass(frozen=True)
class JoinedTablePart:
    """One table of a joined scan in one task: the partition reads it does at the seq."""

    table_id: int
    label: str
    schema_b64: str
    key: tuple[str, ...]
    plans: tuple["ReadPlan", ...]


@dataclass(frozen=True)
class JoinedPartition(InputPartition):
    """A task of a joined scan on the replica: every table's reads, one DuckDB query."""

    config: str
    warehouse: str
    tables: tuple[JoinedTablePart, ...]
    pushed: str | None


@dataclass(frozen=True)
class JoinedSourcePartition(InputPartition):
    """A joined scan answered by the source: the whole pushed subplan as one source query."""

    config: str
    source: str
    table_ids: tuple[int, ...]
    pushed: str | None
    snapshot: str | None


@dataclass(frozen=True)
class SourcePartition(InputPartition):
    """A scan answered by the source itself (failover / fallback)."""

    config: str
    source: str
    table_id: int
    pushed: str | None
    snapshot: str | None  # an exported snapshot to read at, if the caller holds one


class HtapDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "htap"

    def schema(self) -> str:
        from htap.pushdown.spark_types import spark_ddl
        from htap.pushdown.system_tables import SCHEMAS, is_system_table

        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            return spark_ddl(SCHEMAS[opts.table])
        from htap.replica.partitions import decode_bounds, partition_count

        _, store, table = _open(opts)
        try:
            _deltas, rows, size = store.delta_stats(table.id)
        finally:
            store.close()
        return spark_ddl(table.arrow_schema, (rows, size, partition_count(decode_bounds(table.partition_bounds_b64))))

    def reader(self, schema: StructType) -> DataSourceReader:
        from htap.pushdown.system_tables import is_system_table

        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            return SystemTableReader(opts, schema)
        return HtapReader(opts, schema)


@dataclass(frozen=True)
class SystemPartition(InputPartition):
    batches: bytes  # the system table's rows after the pushed subplan, as Arrow IPC


class SystemTableReader(DataSourceReader):
    """`<catalog>.htap.tables` / `.freshness`: built on the driver from the metadata store."""

    def __init__(self, opts: ScanOptions, schema: StructType):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import load_config
        from htap.pushdown.system_tables import query, rows
        from htap.replica.metadata import MetadataStore
        from htap.rewrite.subplan import PushedSubplan

        cfg = load_config(opts.config)
        output = to_arrow_schema(schema, timezone="UTC")
        with MetadataStore(cfg.metadata) as store:
            batches = query(rows(store, cfg.window_s, opts.table), PushedSubplan.from_json(opts.pushed), output)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, output) as w:
            for b in batches:
                w.write_batch(b)
        self._partition = SystemPartition(sink.getvalue().to_pybytes())

    def partitions(self) -> list[InputPartition]:
        return [self._partition]

    def read(self, partition: SystemPartition) -> Iterator:
        import pyarrow as pa

        yield from pa.ipc.open_stream(pa.py_buffer(partition.batches))


class HtapReader(DataSourceReader):
    """Planning (on the driver): route the scan, fix its snapshot, pin it, check access."""

    def __init__(self, opts: ScanOptions, schema: StructType):
        try:
            self._plan(opts, schema)
        except (NoSuchTableError, PermissionError):
            raise
        except HtapError as e:
            raise PlanningError(e) from e

    def _plan(self, opts: ScanOptions, schema: StructType) -> None:
        from htap.pushdown.planning import ScanRequest, plan_scan
        from htap.pushdown.routing import ROUTE_REPLICA
        from htap.pushdown.source_reader import check_access, source_ranges
        from htap.pushdown.source_snapshot import export_held_snapshot
        from htap.replica.warehouse import open_warehouse
        from htap.rewrite.subplan import PushedSubplan

        cfg, store, table = _open(opts)
        source = cfg.source(opts.source)
        self.schema = schema
        try:
            subplan = PushedSubplan.from_json(opts.pushed)
            if subplan.join is not None:
                self._plan_join(opts, cfg, store, subplan)
                return
            if opts.user:  # a round trip to the source: before the scan's metadata transaction
                denied = check_access(source, opts.user, table, sorted(subplan.referenced_columns() or [c.name for c in table.columns]))
                if denied:
                    raise PermissionError(f"{PERMISSION_MARKER}: {denied}: the replica never widens access")
            request = ScanRequest(
                source=source.name, schema=opts.schema, table=opts.table, mode=opts.route,
                as_of_seq=opts.as_of_seq, as_of_time=opts.as_of_time, source_snapshot=opts.source_snapshot,
                snapshot_token=opts.snapshot_token, snapshot_tables=opts.snapshot_tables,
                warehouse_problem=open_warehouse(cfg).unreachable(),
            )
            plan = plan_scan(store, request, subplan, window_s=cfg.window_s, pin_ttl_s=cfg.pin_ttl_s,
                             export=lambda: export_held_snapshot(str(cfg.path), source.name))
            table = plan.table
            if plan.route.target == ROUTE_REPLICA:
                self._partitions: list[InputPartition] = [
                    ReplicaPartition(
                        config=str(cfg.path),
                        table_id=table.id,
                        warehouse=str(cfg.warehouse),
                        table_label=f"{table.source}.{table.qualified_name}",
                        table_schema_b64=table.arrow_schema_b64,
                        key=table.key,
                        plan=read,
                        pushed=opts.pushed,
                    )
                    for read in plan.reads
                ]
            else:
                # Key ranges as parallel tasks, only at a snapshot they all share (issue 14).
                ranges = (source_ranges(source, table, opts.pushed, cfg.source_range_rows)
                          if plan.source_snapshot else [opts.pushed])
                self._partitions = [
                    SourcePartition(str(cfg.path), source.name, table.id, pushed, plan.source_snapshot) for pushed in ranges
                ]
        finally:
            store.close()

    def _plan_join(self, opts: ScanOptions, cfg, store, subplan) -> None:
        """A scan with joins pushed into it: all its tables routed, pinned and recorded in one
        metadata transaction; one task, or one per partition of the split table (its others
        read whole in every task); on the source, one query at the query's snapshot."""
        from htap.pushdown.planning import ScanRequest, plan_scans
        from htap.pushdown.routing import ROUTE_REPLICA
        from htap.pushdown.source_reader import check_access
        from htap.pushdown.source_snapshot import export_held_snapshot
        from htap.replica.warehouse import open_warehouse

        source = cfg.source(opts.source)
        problem = open_warehouse(cfg).unreachable()
        join = subplan.join
        tables = []
        for name in join.table_names():
            schema_name, table_name = name.split(".", 1)
            try:
                tables.append(store.get_table(source.name, schema_name, table_name))
            except NoSuchTableError as e:
                raise NoSuchTableError(f"{NO_SUCH_TABLE_MARKER}: {e}") from e
        if opts.user:  # round trips to the source: before the scan's metadata transaction
            for table, joined in zip(tables, join.tables):
                columns = sorted(joined.subplan.referenced_columns() or [c.name for c in table.columns])
                denied = check_access(source, opts.user, table, columns)
                if denied:
                    raise PermissionError(f"{PERMISSION_MARKER}: {denied}: the replica never widens access")
        requests = [
            ScanRequest(
                source=source.name, schema=t.schema, table=t.name, mode=opts.route, as_of_seq=opts.as_of_seq,
                as_of_time=opts.as_of_time, source_snapshot=opts.source_snapshot, snapshot_token=opts.snapshot_token,
                snapshot_tables=opts.snapshot_tables, warehouse_problem=problem,
            )
            for t in tables
        ]
        plans = plan_scans(store, requests, [j.subplan for j in join.tables], window_s=cfg.window_s,
                           pin_ttl_s=cfg.pin_ttl_s, export=lambda: export_held_snapshot(str(cfg.path), source.name))
        if plans[0].route.target != ROUTE_REPLICA:
            self._partitions = [JoinedSourcePartition(str(cfg.path), source.name, tuple(p.table.id for p in plans),
                                                      opts.pushed, plans[0].source_snapshot)]
            return

        def part(plan, reads) -> JoinedTablePart:
            t = plan.table
            return JoinedTablePart(t.id, f"{t.source}.{t.qualified_name}", t.arrow_schema_b64, t.key, tuple(reads))

        if join.split is None:
            tasks = [tuple(part(p, p.reads) for p in plans)]
        else:
            tasks = [
                tuple(part(p, (read,) if i == join.split else p.reads) for i, p in enumerate(plans))
                for read in plans[join.split].reads
            ]
        self._partitions = [JoinedPartition(str(cfg.path), str(cfg.warehouse), task, opts.pushed) for task in tasks]

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition) -> Iterator:
        if isinstance(partition, SourcePartition):
            yield from self._read_source(partition)
            return
        if isinstance(partition, JoinedSourcePartition):
            yield from self._read_joined_source(partition)
            return
        try:
            if isinstance(partition, JoinedPartition):
                yield from self._read_joined(partition)
            else:
                yield from self._read(partition)
        except DamagedReplicaError as e:
            # A missing or corrupt file (and only that): mark the table so queries fail over
            # instead of failing again, until a re-check finds its files intact.
            from htap.conf import load_config
            from htap.replica.health import mark_damaged
            from htap.replica.metadata import MetadataStore

            if isinstance(partition, JoinedPartition):
                ids = [t.table_id for t in partition.tables if f"(table {t.label})" in str(e)]
            else:
                ids = [partition.table_id]
            with MetadataStore(load_config(partition.config).metadata) as store:
                for table_id in ids:
                    mark_damaged(store, table_id, e)
            raise

    def _read_joined(self, partition: "JoinedPartition") -> Iterator:
        import contextlib

        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import load_config
        from htap.pushdown.replica_reader import JoinedTableRead, read_joined
        from htap.replica.leases import kept, renewed_plan
        from htap.replica.metadata import MetadataStore
        from htap.replica.models import TableInfo
        from htap.replica.warehouse import open_warehouse
        from htap.rewrite.subplan import PushedSubplan

        cfg = load_config(partition.config)
        with MetadataStore(cfg.metadata) as store:  # every read's lease renewed while the task reads
            renewed = [tuple(renewed_plan(store, t.table_id, p, cfg.pin_ttl_s, cfg.window_s) for p in t.plans)
                       for t in partition.tables]
        reads = [
            JoinedTableRead(t.label, TableInfo.decode_schema(t.schema_b64), list(t.key), plans)
            for t, plans in zip(partition.tables, renewed)
        ]
        with contextlib.ExitStack() as leases:
            for lease in {p.lease for plans in renewed for p in plans if p.lease is not None}:
                leases.enter_context(kept(str(cfg.metadata), lease, cfg.pin_ttl_s))
            yield from read_joined(open_warehouse(cfg), reads, PushedSubplan.from_json(partition.pushed),
                                   to_arrow_schema(self.schema, timezone="UTC"))

    def _read_joined_source(self, partition: "JoinedSourcePartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import load_config
        from htap.pushdown import partials
        from htap.pushdown.source_reader import read_joined_source
        from htap.replica.metadata import MetadataStore
        from htap.rewrite.subplan import PushedSubplan

        cfg = load_config(partition.config)
        with MetadataStore(cfg.metadata) as store:
            tables = [store.table_by_id(i) for i in partition.table_ids]
        subplan = PushedSubplan.from_json(partition.pushed)
        output = to_arrow_schema(self.schema, timezone="UTC")
        sums = partials.decimal_sums(subplan, output)
        for batch in read_joined_source(cfg.source(partition.source), tables, subplan, partials.wide(output, sums),
                                        partition.snapshot):
            yield from partials.fit(batch, subplan, output) if sums else (batch,)

    def _read_source(self, partition: "SourcePartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import load_config
        from htap.pushdown import partials
        from htap.pushdown.source_reader import read_source
        from htap.replica.metadata import MetadataStore
        from htap.rewrite.subplan import PushedSubplan

        import pyarrow as pa

        cfg = load_config(partition.config)
        with MetadataStore(cfg.metadata) as store:
            table = store.table_by_id(partition.table_id)
        subplan = PushedSubplan.from_json(partition.pushed)
        output = to_arrow_schema(self.schema, timezone="UTC")
        if subplan.needs_no_column:  # `SELECT 1 FROM t`: read the first key column, hand Spark only the rows
            carrier = table.key[0]
            subplan, output = subplan.carrying_rows(carrier), pa.schema([table.arrow_schema.field(carrier)])
        sums = partials.decimal_sums(subplan, output)
        for batch in read_source(cfg.source(partition.source), table, subplan, partials.wide(output, sums), partition.snapshot):
            if len(self.schema) == 0:
                yield batch.select([])
            else:
                yield from partials.fit(batch, subplan, output) if sums else (batch,)

    def _read(self, partition: "ReplicaPartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import load_config
        from htap.pushdown.replica_reader import read_plan
        from htap.replica.warehouse import open_warehouse
        from htap.replica.leases import kept, renewed_plan
        from htap.replica.metadata import MetadataStore
        from htap.replica.models import TableInfo
        from htap.rewrite.subplan import PushedSubplan

        # The plan's lease is renewed while this task reads (re-planned if it lapsed meanwhile).
        cfg = load_config(partition.config)
        with MetadataStore(cfg.metadata) as store:
            plan = renewed_plan(store, partition.table_id, partition.plan, cfg.pin_ttl_s, cfg.window_s)
        with kept(str(cfg.metadata), plan.lease, cfg.pin_ttl_s):
            yield from read_plan(
                open_warehouse(cfg),
                partition.table_label,
                TableInfo.decode_schema(partition.table_schema_b64),
                list(partition.key),
                plan,
                PushedSubplan.from_json(partition.pushed),
                to_arrow_schema(self.schema, timezone="UTC"),
            )
