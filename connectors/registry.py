"""The one place that knows the source kinds: kind -> config class, source class, seq codec.

Everything else asks a config (`cfg.codec`, `cfg.origin`) or a source (`open_source`,
`open_queryable`) and never branches on a kind. Source classes load lazily: their drivers are
optional extras (`pip install spark-htap[mysql]`, `[kafka]`), and a missing driver is an error
that says which extra to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from htap.conf import CONFIG_CLASSES, SourceConfig
from htap.connectors.changes import ChangeSource
from htap.connectors.queryable import QueryableSource, ThroughOrigin
from htap.errors import ConfigError, SourceError
from htap.seq import SeqCodec


@dataclass(frozen=True)
class SourceKind:
    kind: str
    config: type[SourceConfig]
    module: str  # where the ChangeSource class lives (imported when first used)
    cls: str
    extra: str | None  # the pip extra holding its drivers (None: always installed)
    drivers: tuple[str, ...] = ()  # top-level modules of those drivers

    def source_class(self) -> type[ChangeSource]:
        for driver in self.drivers:
            try:
                importlib.import_module(driver)
            except ImportError as e:
                raise SourceError(
                    f"{self.kind} sources need the {driver} driver, which is not installed: "
                    f"pip install 'spark-htap[{self.extra}]'"
                ) from e
        return getattr(importlib.import_module(self.module), self.cls)


KINDS: dict[str, SourceKind] = {
    k.kind: k
    for k in (
        SourceKind("postgres", CONFIG_CLASSES["postgres"], "htap.connectors.postgres", "PostgresSource", None),
        SourceKind("mysql", CONFIG_CLASSES["mysql"], "htap.connectors.mysql.source", "MySQLSource", "mysql",
                   ("pymysql", "pymysqlreplication")),
        SourceKind("debezium", CONFIG_CLASSES["debezium"], "htap.connectors.debezium.source", "DebeziumSource", None),
    )
}


def source_kind(kind: str) -> SourceKind:
    if kind not in KINDS:
        raise ConfigError(f"source kind {kind!r} is not supported; use one of {tuple(KINDS)}")
    return KINDS[kind]


def open_source(config: SourceConfig) -> ChangeSource:
    return source_kind(config.kind).source_class()(config)


def open_queryable(config: SourceConfig) -> QueryableSource:
    """The database that answers failover reads and verification for a source: the source
    itself, or a Debezium source's origin (`source_dsn`)."""
    origin = config.origin
    if origin is None:
        raise SourceError(
            f"source {config.name} ({config.kind}) has no database to read from: set sources.{config.name}.source_dsn "
            f"to the origin database (a libpq connection string, or mysql://user:password@host:port/database) for "
            f"failover reads and verification"
        )
    if origin is config:
        return open_source(config).queryable()
    return ThroughOrigin(config, open_source(origin))


def seq_codec(config: SourceConfig | None) -> SeqCodec:
    """How a source spells seqs (plain integers for an unknown source)."""
    from htap.seq import PLAIN

    return config.codec if config is not None else PLAIN
