"""The `[service]` section: how `htap serve` is watched (metrics, health) and what it watches
in the sources (retained log). Separate from `[replica]`, which describes the data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from htap.errors import ConfigError

# key -> (default, description).
SERVICE_KEYS: dict[str, tuple[object, str]] = {
    "metrics_address": (
        "", "host:port of the Prometheus metrics (/metrics) and health (/health) endpoint of `htap serve`; "
        "empty: off (e.g. \"127.0.0.1:9464\"; \"0.0.0.0:9464\" for other hosts)",
    ),
    "retained_wal_warning_bytes": (
        1 << 30, "warn when a source keeps more log than this for the replica (Postgres: the slot's WAL); 0: never",
    ),
    "source_check_interval_s": (10.0, "seconds between checks of each source's retained log and lag"),
    "health_max_lag_s": (300.0, "/health answers 503 when a source's durable position is older than this; 0: not checked"),
    "tail_address": (
        "127.0.0.1:0", "host:port where queries read the changes not yet checkpointed (Arrow Flight; port 0: any free "
        "port, registered in the metadata store; \"0.0.0.0:8815\" for executors on other hosts); empty: off",
    ),
    "tail_secret": (
        "", "the secret every read of the in-memory tail must present; empty: a random one per start, kept in the "
        "metadata store (anyone who can read the metadata store may read the tail)",
    ),
    "tail_bytes": (256 << 20, "memory the in-memory tail may hold; past it the service checkpoints early"),
}


@dataclass(frozen=True)
class ServiceConfig:
    metrics_address: str = ""
    retained_wal_warning_bytes: int = 1 << 30
    source_check_interval_s: float = 10.0
    health_max_lag_s: float = 300.0
    tail_address: str = "127.0.0.1:0"
    tail_secret: str = ""
    tail_bytes: int = 256 << 20

    @property
    def metrics_endpoint(self) -> tuple[str, int] | None:
        """(host, port) to listen on, or None when the endpoint is off."""
        if not self.metrics_address:
            return None
        host, _, port = self.metrics_address.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


def parse_service(raw: object, path: Path) -> ServiceConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [service] must be a table")
    for key in raw:
        if key not in SERVICE_KEYS:
            raise ConfigError(f"{path}: unknown config key 'service.{key}'; known keys: {', '.join(SERVICE_KEYS)}")
    address = _address(raw, "metrics_address", "127.0.0.1:9464", 1, path)
    tail_address = _address(raw, "tail_address", "127.0.0.1:8815", 0, path)
    secret = raw.get("tail_secret", "")
    if not isinstance(secret, str):
        raise ConfigError(f"{path}: service.tail_secret must be a string, got {type(secret).__name__}")
    numbers = {}
    for key in ("retained_wal_warning_bytes", "source_check_interval_s", "health_max_lag_s", "tail_bytes"):
        default = SERVICE_KEYS[key][0]
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: service.{key} must be a number, got {value!r}")
        if isinstance(default, int) and value != int(value):
            raise ConfigError(f"{path}: service.{key} must be a whole number, got {value!r}")
        if value < 0 or (key == "source_check_interval_s" and value <= 0):
            raise ConfigError(f"{path}: service.{key} must be {'greater than 0' if key == 'source_check_interval_s' else 'at least 0'}, got {value!r}")
        numbers[key] = type(default)(value)
    return ServiceConfig(metrics_address=address, tail_address=tail_address, tail_secret=secret, **numbers)


def _address(raw: dict, key: str, example: str, lowest_port: int, path: Path) -> str:
    """A host:port setting (empty: off)."""
    address = raw.get(key, SERVICE_KEYS[key][0])
    if not isinstance(address, str):
        raise ConfigError(f"{path}: service.{key} must be a string \"host:port\", got {address!r}")
    if address:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not lowest_port <= int(port) < 65536:
            raise ConfigError(
                f"{path}: service.{key} must look like \"{example}\" (host:port, port {lowest_port}-65535), got {address!r}"
            )
    return address
