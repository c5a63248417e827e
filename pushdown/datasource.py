"""The `htap` Python data source: Spark reads HTAP tables through it.

The Java catalog shim builds it with options naming the config, the table and the pushed
subplan (JSON from the shim's scan builder). Planning (on the driver) fixes the snapshot seq and
the delta files to read; executors then merge those deltas at that seq and run the subplan in
DuckDB, streaming Arrow record batches back to Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from htap.errors import ConfigError, NoSuchTableError, ReplicaError
from htap.replica.snapshot import ReadPlan

# Marker the Java shim looks for to turn a Python failure into Spark's NoSuchTableException.
NO_SUCH_TABLE_MARKER = "HTAP_NO_SUCH_TABLE"

OPTION_CONFIG = "config"
OPTION_SOURCE = "source"
OPTION_TABLE = "table"
OPTION_PUSHED = "pushed"
OPTION_AS_OF_SEQ = "as_of_seq"  # FOR VERSION AS OF <seq>
OPTION_AS_OF_TIME = "as_of_time"  # FOR TIMESTAMP AS OF: Unix seconds
OPTIONS = (OPTION_CONFIG, OPTION_SOURCE, OPTION_TABLE, OPTION_PUSHED, OPTION_AS_OF_SEQ, OPTION_AS_OF_TIME)


@dataclass(frozen=True)
class ScanOptions:
    """The data source's string options, parsed once."""

    config: str | None
    source: str | None
    schema: str
    table: str
    pushed: str | None
    as_of_seq: int | None = None
    as_of_time: float | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ScanOptions":
        opts = {k.lower(): v for k, v in options.items()}
        unknown = set(opts) - set(OPTIONS) - {"path"}
        if unknown:
            raise ConfigError(f"unknown htap data source option(s) {sorted(unknown)}; known: {', '.join(OPTIONS)}")
        qualified = opts.get(OPTION_TABLE)
        if not qualified or "." not in qualified:
            raise ConfigError("option `table` must name an HTAP table as <schema>.<table>")
        schema, table = qualified.split(".", 1)
        try:
            as_of_seq = int(opts[OPTION_AS_OF_SEQ]) if opts.get(OPTION_AS_OF_SEQ) else None
            as_of_time = float(opts[OPTION_AS_OF_TIME]) if opts.get(OPTION_AS_OF_TIME) else None
        except ValueError as e:
            raise ConfigError(f"time travel: {e}; VERSION AS OF takes a seq (an integer)") from e
        return cls(
            opts.get(OPTION_CONFIG), opts.get(OPTION_SOURCE), schema, table, opts.get(OPTION_PUSHED), as_of_seq, as_of_time
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


class HtapDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "htap"

    def schema(self) -> str:
        from htap.pushdown.spark_types import spark_ddl

        _, store, table = _open(ScanOptions.parse(self.options))
        store.close()
        return spark_ddl(table.arrow_schema)

    def reader(self, schema: StructType) -> "HtapReader":
        return HtapReader(ScanOptions.parse(self.options), schema)


class HtapReader(DataSourceReader):
    def __init__(self, opts: ScanOptions, schema: StructType):
        from htap.replica.snapshot import pin_and_plan, seq_for_time
        from htap.rewrite.subplan import PushedSubplan

        cfg, store, table = _open(opts)
        try:
            if not table.readable:
                raise ReplicaError(
                    f"HTAP table {table.qualified_name} is not readable yet (state: {table.state}"
                    f"{'; ' + table.error if table.error else ''}); wait for `htap status` to show it streaming"
                )
            if opts.as_of_seq is not None:
                seq = opts.as_of_seq
            elif opts.as_of_time is not None:
                seq = seq_for_time(store, table, opts.as_of_time)
            else:
                seq = table.max_safe_seq
            subplan = PushedSubplan.from_json(opts.pushed)
            plans = pin_and_plan(store, table, seq, cfg.window_s, cfg.pin_ttl_s, subplan)
            store.record_scan(table.id, "replica", seq, subplan.to_dict())
        finally:
            store.close()
        self.schema = schema
        self._partitions = [
            ReplicaPartition(
                config=str(cfg.path),
                table_id=table.id,
                warehouse=str(cfg.warehouse),
                table_label=f"{table.source}.{table.qualified_name}",
                table_schema_b64=table.arrow_schema_b64,
                key=table.key,
                plan=plan,
                pushed=opts.pushed,
            )
            for plan in plans
        ]

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition: ReplicaPartition) -> Iterator:
        try:
            yield from self._read(partition)
        except ReplicaError as e:
            # A damaged replica: mark the table so queries fail over instead of failing again.
            from htap.conf import load_config
            from htap.replica.metadata import MetadataStore
            from htap.replica.models import STATE_UNHEALTHY

            with MetadataStore(load_config(partition.config).metadata) as store:
                store.set_state(partition.table_id, STATE_UNHEALTHY, str(e))
            raise

    def _read(self, partition: "ReplicaPartition") -> Iterator:
        from pathlib import Path

        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.pushdown.replica_reader import read_plan
        from htap.replica.models import TableInfo
        from htap.rewrite.subplan import PushedSubplan

        yield from read_plan(
            Path(partition.warehouse),
            partition.table_label,
            TableInfo.decode_schema(partition.table_schema_b64),
            list(partition.key),
            partition.plan,
            PushedSubplan.from_json(partition.pushed),
            to_arrow_schema(self.schema, timezone="UTC"),
        )
