"""Which ChangeSource implements a configured source kind (imports are lazy: drivers are optional)."""

from __future__ import annotations

from htap.conf import SourceConfig
from htap.connectors.changes import ChangeSource
from htap.errors import ConfigError


def open_source(config: SourceConfig) -> ChangeSource:
    if config.kind == "postgres":
        from htap.connectors.postgres import PostgresSource

        return PostgresSource(config)
    if config.kind == "mysql":
        from htap.connectors.mysql.source import MySQLSource

        return MySQLSource(config)
    if config.kind == "debezium":
        from htap.connectors.debezium.source import DebeziumSource

        return DebeziumSource(config)
    raise ConfigError(f"source {config.name}: kind {config.kind!r} is not supported")
