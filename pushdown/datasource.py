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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from htap.errors import ConfigError, DamagedReplicaError, HtapError, NoSuchTableError
from htap.seq import parse_seq

if TYPE_CHECKING:  # importing it loads DuckDB, pyarrow.compute and numpy: ~0.2 s per worker
    from htap.pushdown.planning import JoinedPartition, ReplicaPartition, SourcePartition
    from htap.replica.read_plans import ReadPlan

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
# Read after a source position (spark.htap.readAfter, or a catalog option): `now` (the source's
# newest commit when the query is planned) or a seq; planning waits up to the timeout (seconds)
# for the replica to cover it (htap.pushdown.planning).
OPTION_READ_AFTER = "read_after"
OPTION_READ_AFTER_TIMEOUT = "read_after_timeout_s"
READ_AFTER_NOW = "now"
READ_AFTER_TIMEOUT_S = 10.0
# Read the changes the service holds in memory, not yet checkpointed (spark.htap.readTail, or a
# catalog option): the query's snapshot may then be the service's visible seq (htap.replica.tail).
OPTION_READ_TAIL = "read_tail"
OPTIONS = (
    OPTION_READ_AFTER, OPTION_READ_AFTER_TIMEOUT, OPTION_READ_TAIL,
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
    read_after: int | str | None = None  # a seq, or READ_AFTER_NOW
    read_after_timeout_s: float = READ_AFTER_TIMEOUT_S
    read_tail: bool = False

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
        read_after, timeout = parse_read_after(opts.get(OPTION_READ_AFTER), opts.get(OPTION_READ_AFTER_TIMEOUT))
        return cls(
            read_after=read_after,
            read_after_timeout_s=timeout,
            read_tail=parse_read_tail(opts.get(OPTION_READ_TAIL)),
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


def parse_read_tail(value: str | None) -> bool:
    """`readTail`: true or false (default false)."""
    text = (value or "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"readTail = {value!r}: use true or false")
    return text == "true"


def parse_read_after(value: str | None, timeout: str | None) -> tuple[int | str | None, float]:
    """`readAfter` (now, or a seq: an integer or a Postgres LSN) and its timeout in seconds."""
    read_after: int | str | None = None
    if value is not None and value.strip():
        text = value.strip()
        if text.lower() == READ_AFTER_NOW:
            read_after = READ_AFTER_NOW
        else:
            try:
                read_after = parse_seq(text)
            except ConfigError as e:
                raise ConfigError(f"readAfter = {value!r}: use `now` or a seq (an integer, or a Postgres LSN like"
                                  " 0/16B3748)") from e
    seconds = READ_AFTER_TIMEOUT_S
    if timeout is not None and timeout.strip():
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:
            raise ConfigError(f"readAfterTimeoutSeconds = {timeout!r}: give a number of seconds, 0 or more")
    return read_after, seconds


def open_scan(opts: ScanOptions):
    """The config, an open metadata store (the caller closes it) and the scan's table."""
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


class HtapDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "htap"

    def schema(self) -> str:
        """The catalog asks the driver's bridge process instead (HtapCatalog.loadTable); this is
        for `spark.read.format("htap")`."""
        from htap.pushdown import change_feed
        from htap.pushdown.spark_types import table_ddl
        from htap.pushdown.system_tables import SCHEMAS, is_system_table

        if change_feed.wanted(self.options):
            opts = ScanOptions.parse({k: v for k, v in self.options.items() if k.lower() not in change_feed.OPTIONS})
            cfg, store, _table = open_scan(opts)
            try:
                return change_feed.change_ddl(store, cfg.source(opts.source).name, opts.schema, opts.table)
            finally:
                store.close()
        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            from htap.pushdown.spark_types import spark_ddl

            return spark_ddl(SCHEMAS[opts.table])
        cfg, store, _table = open_scan(opts)
        try:
            return table_ddl(store, cfg.source(opts.source).name, opts.schema, opts.table)
        finally:
            store.close()

    def reader(self, schema: StructType) -> DataSourceReader:
        from htap.pushdown import change_feed
        from htap.pushdown.system_tables import is_system_table

        if change_feed.wanted(self.options):
            return change_feed.ChangeFeedReader(self.options, schema)
        opts = ScanOptions.parse(self.options)
        if is_system_table(opts.schema, opts.table):
            return SystemTableReader(opts, schema)
        return HtapReader(opts, schema)


    def streamReader(self, schema: StructType):
        """Streaming reads are the change feed's (htap.pushdown.change_feed)."""
        from htap.pushdown import change_feed

        if not change_feed.wanted(self.options):
            raise ConfigError("a streaming read of an HTAP table is its change feed: set option readChangeFeed=true")
        return change_feed.ChangeFeedStreamReader(self.options, schema)


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
        import time

        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.conf import SPARK_CONFIG_HINT, cached_config
        from htap.pushdown.system_tables import query, rows
        from htap.replica.metadata import MetadataStore
        from htap.replica.tail import statuses as tail_statuses
        from htap.rewrite.pushed import PushedPlan

        cfg = cached_config(opts.config, missing_hint=SPARK_CONFIG_HINT)
        if cfg.access.login_required:  # the replica's state is for logged-in roles too
            opts.reader_role(cfg, cfg.source(opts.source))
        output = to_arrow_schema(schema, timezone="UTC")
        with MetadataStore(cfg.metadata) as store:
            tails = tail_statuses(list(cfg.sources), store.service_beats(), time.time(), cfg.service.tail_secret)
            batches = query(rows(store, cfg.window_s, opts.table, tails), PushedPlan.from_json(opts.pushed), output)
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
    """Planned on the driver (htap.pushdown.planning.plan_partitions); read on the executors."""

    def __init__(self, opts: ScanOptions, schema: StructType):
        from htap.pushdown.planning import plan_partitions

        self.schema = schema
        try:
            self._partitions = plan_partitions(opts)
        except (NoSuchTableError, PermissionError):
            raise
        except HtapError as e:
            raise PlanningError(e) from e

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition) -> Iterator:
        from htap.pushdown.planning import JoinedPartition, ReplicaPartition, SourcePartition

        if type(partition) is InputPartition:  # PySpark's stand-in when planning left no partition to read
            return
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
        from htap.replica.metadata import MetadataStore
        from htap.replica.models import TableInfo
        from htap.replica.warehouse import open_warehouse_at
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
