"""The `htap` Python data source: Spark reads HTAP tables through it.

The Java catalog shim builds it with options naming the config, the table and the pushed
plan (JSON from the shim's one translator). Planning (on the driver) fixes the snapshot seq and
the delta files to read; executors then merge those deltas at that seq and run the plan in
DuckDB, streaming Arrow record batches back to Spark.

Imports of our own modules sit inside the methods on purpose (PySpark's worker model): Spark
imports this module (through `pyspark_htap`) in every Python worker that merely looks data
sources up, so the module itself loads only pyspark; the readers, DuckDB, the metadata store
and the source drivers load in the worker that plans or reads.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from htap.errors import ConfigError, DamagedReplicaError, HtapError, NoSuchTableError
from htap.seq import parse_seq

if TYPE_CHECKING:  # importing it loads DuckDB, pyarrow.compute and numpy: ~0.2 s per worker
    from htap.replica.snapshot import ReadPlan

# Marker of a table missing when a scan is planned (the catalog's loadTable found it through the
# bridge, catalog/bridge.py table-schema, which answers a missing table with its exit code).
NO_SUCH_TABLE_MARKER = "HTAP_NO_SUCH_TABLE"
# Marker the Java shim turns into a SecurityException (HtapBatch).
PERMISSION_MARKER = "HTAP_PERMISSION_DENIED"
# Marker of a damaged delta found by an executor: `HTAP_DAMAGED_REPLICA{json}` (table_id, table,
# delta). Executors never write the metadata store; the shim's HtapQueryListener finds the marker
# in the failed query's error on the driver and has `htap.catalog.bridge report-damage` check the
# file and mark the table (HtapQueryListener.java).
DAMAGE_MARKER = "HTAP_DAMAGED_REPLICA"
# Marker of any other error of ours while planning a scan (routing, snapshot, metadata): the Java
# shim (HtapBatch) turns the line after it into Spark's IllegalArgumentException, so the Spark
# user sees one readable line, not a Python traceback.
ERROR_MARKER = "HTAP_ERROR"


class PlanningError(HtapError):
    """An HtapError raised while planning a scan, as one marked line for the Java shim."""

    def __init__(self, error: HtapError):
        line = " ".join(str(error).split())
        super().__init__(f"{ERROR_MARKER}: {line}")

OPTION_CONFIG = "config"
OPTION_SOURCE = "source"
OPTION_TABLE = "table"
OPTION_PUSHED = "pushed"  # the pushed plan, JSON (htap.rewrite.pushed)
OPTION_ROUTE = "route"  # auto | replica | source
OPTION_USER = "user"  # source user whose privileges every read must respect
OPTION_PASSWORD = "password"  # its password (access.mode = "login"); never logged or shown
OPTION_PASSWORD_FILE = "password_file"  # or a file holding it, read on the driver
OPTION_AS_OF_VERSION = "as_of_version"  # FOR VERSION AS OF: a seq (Postgres: LSN or integer)
OPTION_AS_OF_SEQ = "as_of_seq"  # the same, as a catalog option (e.g. for verification)
OPTION_AS_OF_TIME = "as_of_time"  # FOR TIMESTAMP AS OF: Unix seconds
OPTION_SOURCE_SNAPSHOT = "source_snapshot"  # an exported Postgres snapshot for source reads
OPTION_SNAPSHOT_TOKEN = "snapshot_token"  # set by the snapshot rule: scans of one query share it
OPTION_SNAPSHOT_TABLES = "snapshot_tables"  # the query's HTAP tables, catalog.schema.table, comma-separated
OPTION_LEASE_OWNER = "lease_owner"  # set by the shim per scan: the driver holds the scan's leases under it
# Where executors read the metadata store (read-only), e.g. a Postgres URL of a role with only
# SELECT; default: the config's replica.metadata. Executors never write it.
OPTION_EXECUTOR_METADATA = "executor_metadata"
OPTIONS = (
    OPTION_CONFIG, OPTION_SOURCE, OPTION_TABLE, OPTION_PUSHED, OPTION_ROUTE, OPTION_USER,
    OPTION_AS_OF_VERSION, OPTION_AS_OF_SEQ, OPTION_AS_OF_TIME, OPTION_SOURCE_SNAPSHOT,
    OPTION_SNAPSHOT_TOKEN, OPTION_SNAPSHOT_TABLES, OPTION_LEASE_OWNER, OPTION_EXECUTOR_METADATA,
    OPTION_PASSWORD, OPTION_PASSWORD_FILE,
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
    lease_owner: str | None = None
    executor_metadata: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None

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
            lease_owner=opts.get(OPTION_LEASE_OWNER) or None,
            executor_metadata=opts.get(OPTION_EXECUTOR_METADATA) or None,
            password=opts.get(OPTION_PASSWORD),
            password_file=opts.get(OPTION_PASSWORD_FILE) or None,
        )

    def reader_role(self, cfg, source) -> str | None:
        """The source role whose privileges this read must respect (htap.pushdown.access); a
        refused read raises PermissionError with PERMISSION_MARKER (the shim's SecurityException)."""
        from htap.errors import AccessError
        from htap.pushdown.access import Credentials, reader_role

        try:
            creds = Credentials.from_options(self.user, self.password, self.password_file)
            return reader_role(cfg, source, creds)
        except AccessError as e:
            raise PermissionError(f"{PERMISSION_MARKER}: {e}") from None


def _open(opts: ScanOptions):
    from htap.conf import SPARK_CONFIG_HINT, cached_config
    from htap.replica.metadata import MetadataStore

    cfg = cached_config(opts.config, missing_hint=SPARK_CONFIG_HINT)
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
    """Everything an executor needs to read one partition at the query's snapshot (it reads no
    config file, and the metadata store only read-only, at `metadata`)."""

    config: str
    table_id: int
    warehouse: str  # the warehouse's location, and below how to reach it: no config file needed
    table_label: str
    table_schema_b64: str
    key: tuple[str, ...]
    plan: "ReadPlan"
    pushed: str | None
    metadata: str = ""  # where the executor reads the metadata store (read-only)
    window_s: float = 36_000.0
    object_store: object = None  # htap.conf.ObjectStoreConfig of an s3:// warehouse


@dataclass(frozen=True)
class JoinedTablePart:
    """One table of a joined scan in one task: the partition reads it does at the seq."""

    table_id: int
    label: str
    schema_b64: str
    key: tuple[str, ...]
    plans: tuple["ReadPlan", ...]


def _table_part(plan, reads) -> JoinedTablePart:
    """A table's part of a task reading several partitions in one DuckDB query (a joined scan, a
    tree, or a single table's scan in one task): `plan` (htap.pushdown.planning) routed its table,
    `reads` are the partition reads this task does (all of them, or one of a split table's)."""
    t = plan.table
    return JoinedTablePart(t.id, f"{t.source}.{t.qualified_name}", t.arrow_schema_b64, t.key, tuple(reads))


@dataclass(frozen=True)
class JoinedPartition(InputPartition):
    """A task of a joined scan on the replica: every table's reads, one DuckDB query."""

    config: str
    warehouse: str
    tables: tuple[JoinedTablePart, ...]
    pushed: str | None
    metadata: str = ""  # where the executor reads the metadata store (read-only)
    window_s: float = 36_000.0
    object_store: object = None  # htap.conf.ObjectStoreConfig of an s3:// warehouse


@dataclass(frozen=True)
class SourcePartition(InputPartition):
    """A scan answered by the source itself (failover / fallback): the pushed plan as one source
    query over its tables (or one key range of its one table); the executor needs no config
    file and no metadata store."""

    config: str
    source: str
    table_ids: tuple[int, ...]
    pushed: str | None
    snapshot: str | None  # an exported snapshot to read at, if the caller holds one
    source_config: object  # htap.conf.SourceConfig of `source`
    tables: tuple  # htap.replica.models.TableInfo of each scan of the plan
    agreement: object = None  # htap.pushdown.source_reader.SourceReadAgreement, for a snapshot of its own


class HtapDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "htap"

    def schema(self) -> str:
        """The catalog asks the driver's bridge process instead (HtapCatalog.loadTable); this is
        for `spark.read.format("htap")`."""
        from htap.pushdown.spark_types import table_ddl
        from htap.pushdown.system_tables import SCHEMAS, is_system_table

        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            from htap.pushdown.spark_types import spark_ddl

            return spark_ddl(SCHEMAS[opts.table])
        cfg, store, _table = _open(opts)
        try:
            return table_ddl(store, cfg.source(opts.source).name, opts.schema, opts.table)
        finally:
            store.close()

    def reader(self, schema: StructType) -> DataSourceReader:
        from htap.pushdown.system_tables import is_system_table

        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            return SystemTableReader(opts, schema)
        return HtapReader(opts, schema)


def data_source(options: dict) -> HtapDataSource:
    """The scan's data source, as Spark's `create_data_source` worker would build it: the Java
    shim pickles a call of this (io.sparkhtap.PickledDataSource) instead of a round trip to a
    Python worker per scan."""
    from pyspark.sql.datasource import CaseInsensitiveDict

    return HtapDataSource(options=CaseInsensitiveDict(options))


@dataclass(frozen=True)
class SystemPartition(InputPartition):
    batches: bytes  # the system table's rows after the pushed plan, as Arrow IPC


class SystemTableReader(DataSourceReader):
    """`<catalog>.htap.tables` / `.freshness`: built on the driver from the metadata store."""

    def __init__(self, opts: ScanOptions, schema: StructType):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import SPARK_CONFIG_HINT, cached_config
        from htap.pushdown.system_tables import query, rows
        from htap.replica.metadata import MetadataStore
        from htap.rewrite.pushed import PushedPlan

        cfg = cached_config(opts.config, missing_hint=SPARK_CONFIG_HINT)
        if cfg.access.login_required:  # the replica's state is for logged-in roles too
            opts.reader_role(cfg, cfg.source(opts.source))
        output = to_arrow_schema(schema, timezone="UTC")
        with MetadataStore(cfg.metadata) as store:
            batches = query(rows(store, cfg.window_s, opts.table), PushedPlan.from_json(opts.pushed), output)
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
        from htap.pushdown.planning import ScanRequest, plan_scans
        from htap.pushdown.routing import ROUTE_REPLICA
        from htap.pushdown.source_reader import check_access, source_ranges
        from htap.replica.warehouse import open_warehouse
        from htap.rewrite.pushed import PushedPlan, to_json

        self.schema = schema
        plan = PushedPlan.from_json(opts.pushed)
        cfg, store, _table = _open(opts)
        source = cfg.source(opts.source)
        try:
            tables = []
            for scan in plan.scans:
                schema_name, table_name = scan.table.split(".", 1)
                try:
                    tables.append(store.get_table(source.name, schema_name, table_name))
                except NoSuchTableError as e:
                    raise NoSuchTableError(f"{NO_SUCH_TABLE_MARKER}: {e}") from e
            role = opts.reader_role(cfg, source)  # round trips to the source: before the metadata transaction
            if role:
                for table, scan in zip(tables, plan.scans):
                    denied = check_access(source, role, table, sorted(scan.referenced()))
                    if denied:
                        raise PermissionError(f"{PERMISSION_MARKER}: {denied}: the replica never widens access")
            problem = open_warehouse(cfg).unreachable()
            requests = [
                ScanRequest(
                    source=source.name, schema=t.schema, table=t.name, mode=opts.route, as_of_seq=opts.as_of_seq,
                    as_of_time=opts.as_of_time, source_snapshot=opts.source_snapshot,
                    snapshot_token=opts.snapshot_token, snapshot_tables=opts.snapshot_tables, warehouse_problem=problem,
                )
                for t in tables
            ]
            plans = plan_scans(store, requests, list(plan.scans), plan.to_dict(), window_s=cfg.window_s,
                               pin_ttl_s=cfg.pin_ttl_s, **_held_by_query(cfg, source, opts))
        finally:
            store.close()
        if plans[0].route.target != ROUTE_REPLICA:
            snapshot = plans[0].source_snapshot
            single = len(plans) == 1 and plan.split == 0
            # Key ranges as parallel tasks, only at a snapshot they all share (issue 14).
            ranges = (source_ranges(source, plans[0].table, plan, cfg.source_range_rows)
                      if single and snapshot else [plan])
            what = " JOIN ".join(dict.fromkeys(p.table.qualified_name for p in plans))
            agreement = _agreement(opts, cfg, source.name, snapshot, what)
            self._partitions = [
                SourcePartition(str(cfg.path), source.name, tuple(p.table.id for p in plans),
                                opts.pushed if part is plan else to_json(part), snapshot, source,
                                tuple(p.table for p in plans),
                                agreement and dataclasses.replace(agreement, scan=f"{agreement.scan}/{i}"))
                for i, part in enumerate(ranges)
            ]
            return
        if len(plans) == 1 and plan.split == 0:  # one task per partition: each reads its own
            table = plans[0].table
            self._partitions = [
                ReplicaPartition(
                    config=str(cfg.path), table_id=table.id, warehouse=str(cfg.warehouse),
                    table_label=f"{table.source}.{table.qualified_name}", table_schema_b64=table.arrow_schema_b64,
                    key=table.key, plan=read, pushed=opts.pushed, metadata=opts.executor_metadata or str(cfg.metadata),
                    window_s=cfg.window_s, object_store=cfg.object_store,
                )
                for read in plans[0].reads
            ]
            return
        # Every partition of every scan in one task (its aggregate, order and limit final; even
        # with no partition left after pruning: a global aggregate's row), or one task per
        # partition of the split scan, every other scan read whole in each.
        if plan.split is None:
            tasks = [tuple(_table_part(p, p.reads) for p in plans)]
        else:
            tasks = [
                tuple(_table_part(p, (read,) if i == plan.split else p.reads) for i, p in enumerate(plans))
                for read in plans[plan.split].reads
            ]
        self._partitions = [JoinedPartition(str(cfg.path), str(cfg.warehouse), task, opts.pushed,
                                            opts.executor_metadata or str(cfg.metadata), cfg.window_s,
                                            cfg.object_store) for task in tasks]

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition) -> Iterator:
        if isinstance(partition, (ReplicaPartition, JoinedPartition)):
            _size_duckdb_threads(len(self._partitions))
        if isinstance(partition, SourcePartition):
            yield from self._read_source(partition)
        elif isinstance(partition, JoinedPartition):
            yield from self._read_joined(partition)
        else:
            yield from self._read(partition)

    def _read_joined(self, partition: "JoinedPartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.pushdown.replica_reader import JoinedTableRead, read_joined
        from htap.replica.leases import current_plan
        from htap.replica.metadata import MetadataStore
        from htap.replica.models import TableInfo
        from htap.replica.warehouse import open_warehouse_at
        from htap.rewrite.pushed import PushedPlan

        warehouse = open_warehouse_at(partition.warehouse, partition.object_store)
        plans = [t.plans for t in partition.tables]
        if any(p.lease is not None for ps in plans for p in ps):  # the driver holds the leases: only check them
            with MetadataStore(partition.metadata, read_only=True) as store:
                plans = [tuple(current_plan(store, t.table_id, p, partition.window_s) for p in t.plans)
                         for t in partition.tables]
        reads = [
            JoinedTableRead(t.label, TableInfo.decode_schema(t.schema_b64), list(t.key), ps)
            for t, ps in zip(partition.tables, plans)
        ]
        try:
            yield from read_joined(warehouse, reads, PushedPlan.from_json(partition.pushed),
                                   to_arrow_schema(self.schema, timezone="UTC"))
        except DamagedReplicaError as e:
            # The driver marks the damaged table (DAMAGE_MARKER); executors never write metadata.
            for t, ps in zip(partition.tables, plans):
                if f"(table {t.label})" in str(e):
                    joined = dataclasses.replace(ps[0], delta_paths=tuple(d for p in ps for d in p.delta_paths)) if ps else None
                    if joined is not None:
                        raise DamagedReplicaError(damage_report(t.table_id, joined, e)) from e
            raise

    def _read_source(self, partition: "SourcePartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.pushdown import partials
        from htap.pushdown.source_reader import read_source
        from htap.rewrite.pushed import PushedPlan

        plan = PushedPlan.from_json(partition.pushed)
        output = to_arrow_schema(self.schema, timezone="UTC")
        sums = partials.decimal_sums(plan, output)
        if len(output) == 0:  # `SELECT 1 FROM t`: the source selects a constant, Spark takes the rows
            import pyarrow as pa

            for batch in read_source(partition.source_config, list(partition.tables), plan,
                                     pa.schema([pa.field("__row", pa.int32())]), partition.snapshot, partition.agreement):
                yield batch.select([])
            return
        for batch in read_source(partition.source_config, list(partition.tables), plan, partials.wide(output, sums),
                                 partition.snapshot, partition.agreement):
            yield from partials.fit(batch, plan, output) if sums else (batch,)

    def _read(self, partition: "ReplicaPartition") -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.pushdown.replica_reader import read_plan
        from htap.replica.leases import current_plan
        from htap.replica.warehouse import open_warehouse_at
        from htap.replica.metadata import MetadataStore
        from htap.replica.models import TableInfo
        from htap.rewrite.pushed import PushedPlan

        # The driver holds the plan's lease while the query runs; the task only reads whether
        # it still lives (planned again, unleased, if not: see htap.replica.leases). The task
        # carries the warehouse's location and settings: executors read no config file.
        warehouse = open_warehouse_at(partition.warehouse, partition.object_store)
        plan = partition.plan
        if plan.lease is not None:
            with MetadataStore(partition.metadata, read_only=True) as store:
                plan = current_plan(store, partition.table_id, plan, partition.window_s)
        try:
            yield from read_plan(
                warehouse,
                partition.table_label,
                TableInfo.decode_schema(partition.table_schema_b64),
                list(partition.key),
                plan,
                PushedPlan.from_json(partition.pushed),
                to_arrow_schema(self.schema, timezone="UTC"),
            )
        except DamagedReplicaError as e:
            # A missing or corrupt file (and only that): the driver marks the table so queries
            # fail over instead of failing again (DAMAGE_MARKER); executors never write the
            # metadata store.
            raise DamagedReplicaError(damage_report(partition.table_id, plan, e)) from e


def _held_by_query(cfg, source, opts: ScanOptions) -> dict:
    """What a scan's planning holds for its query, by the scan's lease owner (the driver releases
    both when the query ends): its leases (`holder`), and the source snapshot it may export."""
    from htap.pushdown.source_snapshot import export_held_snapshot
    from htap.replica.leases import query_holder

    return {"export": lambda: export_held_snapshot(str(cfg.path), source.name, owner=opts.lease_owner),
            "holder": query_holder(opts.lease_owner) if opts.lease_owner else None}


def _agreement(opts: ScanOptions, cfg, source: str, snapshot: str | None, what: str):
    """For a source scan of a query whose source reads cannot share one snapshot (MySQL/MariaDB):
    what its task needs to check that it reads the same state as the query's other scans of the
    source (htap.pushdown.source_reader.SourceReadAgreement); None otherwise (Postgres imports
    the one exported snapshot; a scan without the query's token decides alone). The planned
    scan's own id, so a retry of its task replaces, not contradicts, its earlier attempt. The
    record goes to the store as executors reach it (`executor_metadata`, default the config's):
    the one write an executor makes, a row per scan, to that one table."""
    from htap.pushdown.source_reader import SourceReadAgreement, reads_own_snapshot

    if not opts.snapshot_token or not reads_own_snapshot(snapshot):
        return None
    return SourceReadAgreement(opts.executor_metadata or str(cfg.metadata), opts.snapshot_token, source,
                               uuid.uuid4().hex, what)


def _size_duckdb_threads(tasks: int) -> None:
    """DuckDB threads for this task: Spark's CPUs per task (spark.task.cpus), or the host's
    cores shared among the scan's tasks when it has fewer tasks than cores (a joined scan in one
    task keeps every core); DuckDB's default, all cores in every task, oversubscribes them."""
    import os

    from pyspark import TaskContext

    from htap import engine

    context = TaskContext.get()
    cpus = context.cpus() if context is not None else 1
    cores = os.cpu_count() or 1
    engine.size_threads(max(cpus, cores // max(1, min(tasks, cores))))


def damage_report(table_id: int, plan: ReadPlan, error: DamagedReplicaError) -> str:
    """The error's message after DAMAGE_MARKER and what the driver needs to check the file
    and mark the table: the table's id and the damaged delta (the plan's file the message
    names). The driver trusts neither: it marks the table only if that file is a live delta of
    the table and is damaged (htap.catalog.bridge report-damage)."""
    import json

    message = str(error)
    delta = next((p for p in plan.delta_paths if p in message), None)
    facts = json.dumps({"table_id": table_id, "delta": delta}, separators=(",", ":"))
    return f"{DAMAGE_MARKER}{facts} {message}"
