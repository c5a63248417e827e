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
OPTIONS = (OPTION_CONFIG, OPTION_SOURCE, OPTION_TABLE, OPTION_PUSHED)


@dataclass(frozen=True)
class ScanOptions:
    """The data source's string options, parsed once."""

    config: str | None
    source: str | None
    schema: str
    table: str
    pushed: str | None

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
        return cls(opts.get(OPTION_CONFIG), opts.get(OPTION_SOURCE), schema, table, opts.get(OPTION_PUSHED))


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
        from htap.rewrite.subplan import PushedSubplan

        cfg, store, table = _open(opts)
        try:
            if not table.readable:
                raise ReplicaError(
                    f"HTAP table {table.qualified_name} is not readable yet (state: {table.state}"
                    f"{'; ' + table.error if table.error else ''}); wait for `htap status` to show it streaming"
                )
            from htap.replica.snapshot import plan_read

            seq = table.max_safe_seq
            subplan = PushedSubplan.from_json(opts.pushed)
            plan = plan_read(store, table, seq)
            store.record_scan(table.id, "replica", seq, subplan.to_dict())
        finally:
            store.close()
        self.schema = schema
        self.partition = ReplicaPartition(
            warehouse=str(cfg.warehouse),
            table_label=f"{table.source}.{table.qualified_name}",
            table_schema_b64=table.arrow_schema_b64,
            key=table.key,
            plan=plan,
            pushed=opts.pushed,
        )

    def partitions(self) -> list[InputPartition]:
        return [self.partition]

    def read(self, partition: ReplicaPartition) -> Iterator:
        from pathlib import Path

        from pyspark.sql.pandas.types import to_arrow_schema

        from htap.pushdown.replica_reader import read_replica
        from htap.replica.models import TableInfo
        from htap.rewrite.subplan import PushedSubplan

        table_schema = TableInfo.decode_schema(partition.table_schema_b64)
        yield from read_replica(
            Path(partition.warehouse),
            partition.table_label,
            table_schema,
            list(partition.key),
            list(partition.plan.delta_paths),
            partition.plan.seq,
            PushedSubplan.from_json(partition.pushed),
            to_arrow_schema(self.schema, timezone="UTC"),
            floor=partition.plan.floor,
            partial=partition.plan.partial,
        )
