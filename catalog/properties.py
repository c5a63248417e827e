"""Table properties a Spark user (ALTER TABLE ... SET TBLPROPERTIES) or `htap failover` sets."""

from __future__ import annotations

from htap.errors import ConfigError
from htap.replica.metadata import MetadataStore
from htap.replica.models import TableInfo

PROPERTIES = {
    "htap.failover": "true routes every read of the table to the source; false back to the replica",
    "htap.max_staleness": "seconds; a replica further behind than this fails reads over to the source",
}


def set_property(store: MetadataStore, table: TableInfo, key: str, value: str) -> None:
    """Apply one table property; an empty value resets it."""
    if key == "htap.failover":
        if value.lower() not in ("true", "false", ""):
            raise ConfigError(f"htap.failover takes 'true' or 'false', not {value!r}")
        store.set_failover(table.id, value.lower() == "true")
    elif key == "htap.max_staleness":
        try:
            store.set_max_staleness(table.id, float(value) if value else None)
        except ValueError as e:
            raise ConfigError(f"htap.max_staleness takes seconds, not {value!r}") from e
    else:
        raise ConfigError(
            f"unknown table property {key!r}: spark-htap tables take "
            + "; ".join(f"{k} ({doc})" for k, doc in PROPERTIES.items())
        )
