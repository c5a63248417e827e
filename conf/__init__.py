"""One typed configuration model, parsed once from a TOML file.

A config names where the replica lives (warehouse folder and metadata store) and which sources
feed it. The HTAP tables themselves live in the metadata store (added with `htap tables add`),
not in the file, so the file stays small and the same on every node.

Resolution order: the file given explicitly (CLI `--config`, Spark option `config`), else the
`HTAP_CONFIG` environment variable, else `./htap.toml`. Unknown keys are errors that name the key.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from htap.conf.access import ACCESS_KEYS, AccessConfig, parse_access
from htap.conf.service import SERVICE_KEYS, ServiceConfig, parse_service
from htap.errors import ConfigError
from htap.seq import BINLOG, LSN, PLAIN, SeqCodec

CONFIG_ENV = "HTAP_CONFIG"
DEFAULT_CONFIG_FILE = "htap.toml"

# key -> (default, description). One place for every replica setting.
REPLICA_KEYS: dict[str, tuple[object, str]] = {
    "warehouse": ("warehouse", "folder holding the Parquet deltas (relative to the config file), or s3://bucket/prefix"),
    "metadata": ("", "metadata store: a SQLite file (default <warehouse>/metadata.db; <config dir>/metadata.db for an s3:// warehouse) or a postgresql:// URL"),
    "flush_interval_s": (0.5, "seconds between checkpoints that turn buffered changes into deltas"),
    "flush_max_changes": (200_000, "buffered changes that force a checkpoint before the interval"),
    "partition_rows": (1_000_000, "target rows per range partition, chosen at the initial copy"),
    "window_s": (36_000.0, "queryable window: how far back (seconds) reads and time travel can go"),
    "pin_ttl_s": (60.0, "how long a query's snapshot lease keeps compacted-away deltas on disk after its tasks last renewed it"),
    "compaction_interval_s": (5.0, "seconds between compaction passes of the service (0 disables)"),
    "compaction_min_bytes": (4 << 20, "size limit of the smallest compaction tier"),
    "compaction_ratio": (4.0, "growth of the size limit from one tier to the next"),
    "max_deltas": (12, "deltas per partition above which all of them are merged"),
    "source_range_rows": (250_000, "rows per key range of a source (failover) read; ranges run as parallel Spark tasks at one snapshot"),
    # An s3:// warehouse (any S3-compatible store). Empty: the standard AWS environment variables.
    "s3_endpoint": ("", "s3 warehouse: endpoint URL (http://host:port for MinIO, moto, ...); default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS"),
    "s3_region": ("", "s3 warehouse: region; default $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1"),
    "s3_access_key_id": ("", "s3 warehouse: access key; default $AWS_ACCESS_KEY_ID (or ~/.aws, instance roles)"),
    "s3_secret_access_key": ("", "s3 warehouse: secret key; default $AWS_SECRET_ACCESS_KEY"),
    "s3_timeout_s": (10.0, "s3 warehouse: connect and request timeout of one call"),
    "s3_retries": (5, "s3 warehouse: attempts of a call that failed transiently (network, timeouts, throttling), with exponential backoff"),
    "cache_dir": ("", "s3 warehouse: local cache of deltas (relative to the config file); default <config dir>/cache; $HTAP_CACHE_DIR overrides"),
    "cache_bytes": (1 << 30, "s3 warehouse: size limit of the local cache (least recently used deltas are evicted)"),
}
OBJECT_STORE_KEYS = ("s3_endpoint", "s3_region", "s3_access_key_id", "s3_secret_access_key", "s3_timeout_s", "s3_retries",
                     "cache_dir", "cache_bytes")
CACHE_DIR_ENV = "HTAP_CACHE_DIR"
WAREHOUSE_SCHEMES = ("s3://",)
POSTGRES_KEYS: dict[str, tuple[object, str]] = {
    "kind": ("postgres", "source kind: postgres, mysql (also MariaDB) or debezium"),
    "dsn": ("", "postgres: libpq connection string"),
    "slot": ("", "postgres: logical replication slot name; default htap_<source>"),
    "publication": ("", "postgres: publication name; default htap_<source>"),
}
MYSQL_KEYS: dict[str, tuple[object, str]] = {
    "kind": ("postgres", "source kind: postgres, mysql (also MariaDB) or debezium"),
    "dsn": ("", "mysql: mysql://user:password@host:port/database"),
    "host": ("127.0.0.1", "mysql: server host (overrides the dsn's)"),
    "port": (3306, "mysql: server port (overrides the dsn's)"),
    "user": ("", "mysql: user with REPLICATION SLAVE, REPLICATION CLIENT and SELECT (overrides the dsn's)"),
    "password": ("", "mysql: password (overrides the dsn's)"),
    "database": ("", "mysql: default database of the connection (overrides the dsn's)"),
    "server_id": (0, "mysql: server id of the binlog client, unique among the server's replicas; default derived from the source name"),
}
DEBEZIUM_KEYS: dict[str, tuple[object, str]] = {
    "kind": ("postgres", "source kind: postgres, mysql (also MariaDB) or debezium"),
    "path": ("", "debezium: a JSON-lines file or a folder of them holding Debezium events (relative to the config file)"),
    "bootstrap_servers": ("", "debezium: Kafka bootstrap servers, host:port[,host:port...]"),
    "topic_prefix": ("", "debezium: the connector's topic.prefix; data topics are <prefix>.<schema>.<table>"),
    "topics": ([], "debezium: data topics to read instead of <prefix>.<schema>.<table>"),
    "group_id": ("", "debezium: Kafka consumer group; default htap_<source>"),
    "unavailable_value_placeholder": ("__debezium_unavailable_value", "debezium: the connector's unavailable.value.placeholder"),
    "session_timeout_ms": (10_000, "debezium: Kafka consumer-group session timeout; joining the group takes about half of it"),
    "source_dsn": ("", "debezium: the origin database (a libpq connection string or mysql://...), for failover reads and verification"),
}
SOURCE_KEYS: dict[str, tuple[object, str]] = {**DEBEZIUM_KEYS, **MYSQL_KEYS, **POSTGRES_KEYS}


def is_postgres_location(location: str | os.PathLike) -> bool:
    """Whether a metadata store location is a Postgres URL (else a SQLite file)."""
    return str(location).startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class SourceConfig:
    """A configured source; one subclass per kind (CONFIG_CLASSES), each parsing its own keys."""

    name: str
    kind: ClassVar[str] = ""
    KEYS: ClassVar[dict[str, tuple[object, str]]] = {}

    @property
    def codec(self) -> SeqCodec:
        """How this source spells its seqs (status, failure messages, `VERSION AS OF`)."""
        return PLAIN

    @property
    def origin(self) -> "SourceConfig | None":
        """The database failover reads and verification query (itself for a database source;
        for a Debezium source, its `source_dsn` if configured)."""
        return self

    @classmethod
    def parse(cls, name: str, sraw: dict, path: Path) -> "SourceConfig":
        raise NotImplementedError

    @classmethod
    def init_keys(cls, dsn: str) -> dict[str, str]:
        """The keys `htap init` writes for the connection string a user gave."""
        return {"dsn": dsn}


@dataclass(frozen=True)
class PostgresConfig(SourceConfig):
    kind: ClassVar[str] = "postgres"
    KEYS: ClassVar[dict[str, tuple[object, str]]] = POSTGRES_KEYS
    dsn: str = ""
    slot: str = ""
    publication: str = ""

    @property
    def codec(self) -> SeqCodec:
        return LSN

    @classmethod
    def parse(cls, name: str, sraw: dict, path: Path) -> "PostgresConfig":
        if not sraw.get("dsn"):
            raise ConfigError(f"{path}: sources.{name}.dsn is required (a libpq connection string)")
        return cls(
            name=name,
            dsn=sraw["dsn"],
            slot=sraw.get("slot") or f"htap_{name}",
            publication=sraw.get("publication") or f"htap_{name}",
        )


@dataclass(frozen=True)
class MySQLConfig(SourceConfig):
    kind: ClassVar[str] = "mysql"
    KEYS: ClassVar[dict[str, tuple[object, str]]] = MYSQL_KEYS
    dsn: str = ""
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = ""
    password: str = ""
    database: str = ""
    server_id: int = 0

    @property
    def codec(self) -> SeqCodec:
        return BINLOG

    @classmethod
    def parse(cls, name: str, sraw: dict, path: Path) -> "MySQLConfig":
        return _mysql_source(name, sraw, path)


@dataclass(frozen=True)
class DebeziumConfig(SourceConfig):
    kind: ClassVar[str] = "debezium"
    KEYS: ClassVar[dict[str, tuple[object, str]]] = DEBEZIUM_KEYS
    path: str = ""
    bootstrap_servers: str = ""
    topic_prefix: str = ""
    topics: tuple[str, ...] = ()
    group_id: str = ""
    unavailable_value_placeholder: str = "__debezium_unavailable_value"
    session_timeout_ms: int = 10_000
    source_dsn: str = ""

    @property
    def codec(self) -> SeqCodec:
        # Debezium events carry the origin's own positions (htap.connectors.debezium.positions).
        return self.origin.codec if self.origin is not None else PLAIN

    @property
    def origin(self) -> SourceConfig | None:
        if not self.source_dsn:
            return None
        return origin_config(self.name, self.source_dsn, Path(f"sources.{self.name}.source_dsn"))

    @classmethod
    def init_keys(cls, dsn: str) -> dict[str, str]:
        """kafka://host:port[,host:port]/<topic prefix>, or a file or folder of events (resolved
        from where the command runs)."""
        if dsn.startswith("kafka://"):
            servers, _, prefix = dsn[len("kafka://"):].partition("/")
            return {"bootstrap_servers": servers, "topic_prefix": prefix}
        return {"path": dsn if dsn.startswith("/") else str(Path(dsn).resolve())}

    @classmethod
    def parse(cls, name: str, sraw: dict, path: Path) -> "DebeziumConfig":
        cfg = _debezium_source(name, sraw, path)
        if cfg.source_dsn:
            origin_config(name, cfg.source_dsn, path)  # fails now, naming the key, rather than at failover
        return cfg


CONFIG_CLASSES: dict[str, type[SourceConfig]] = {c.kind: c for c in (PostgresConfig, MySQLConfig, DebeziumConfig)}
SOURCE_KINDS = tuple(CONFIG_CLASSES)
KIND_KEYS: dict[str, tuple[str, ...]] = {kind: tuple(c.KEYS) for kind, c in CONFIG_CLASSES.items()}


def origin_config(name: str, dsn: str, path: Path) -> SourceConfig:
    """A Debezium source's origin database from its `source_dsn`: mysql:// (or mariadb://) is
    MySQL/MariaDB, anything else a libpq connection string."""
    if dsn.startswith(("mysql://", "mariadb://")):
        return MySQLConfig.parse(name, {"dsn": dsn}, path)
    return PostgresConfig.parse(name, {"dsn": dsn}, path)


def is_url(location: str | os.PathLike) -> bool:
    """Whether a warehouse location is an object-store URL (else a local folder)."""
    return "://" in str(location)


@dataclass(frozen=True)
class ObjectStoreConfig:
    """How to reach an s3:// warehouse, and the local cache in front of it (htap.replica.warehouse)."""

    endpoint: str = ""
    region: str = ""
    access_key_id: str = ""
    secret_access_key: str = ""
    timeout_s: float = 10.0
    retries: int = 5
    cache_dir: Path | None = None
    cache_bytes: int = 1 << 30


@dataclass(frozen=True)
class HtapConfig:
    path: Path
    warehouse: Path | str  # a local folder, or an s3://bucket/prefix URL
    metadata: Path | str  # SQLite file, or a postgresql:// URL
    flush_interval_s: float
    flush_max_changes: int
    partition_rows: int = 1_000_000
    window_s: float = 36_000.0
    pin_ttl_s: float = 60.0
    compaction_interval_s: float = 5.0
    compaction_min_bytes: int = 4 << 20
    compaction_ratio: float = 4.0
    max_deltas: int = 12
    source_range_rows: int = 250_000
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    service: ServiceConfig = ServiceConfig()  # [service]: metrics, health, source watching
    access: AccessConfig = AccessConfig()  # [access]: who may read through Spark
    object_store: ObjectStoreConfig = ObjectStoreConfig()  # an s3:// warehouse's endpoint, credentials, cache

    def source(self, name: str | None = None) -> SourceConfig:
        """The named source, or the only one when no name is given."""
        if name is None:
            if len(self.sources) != 1:
                raise ConfigError(
                    f"{self.path}: {len(self.sources)} sources are configured "
                    f"({', '.join(self.sources) or 'none'}); name one (option `source`)"
                )
            return next(iter(self.sources.values()))
        if name not in self.sources:
            raise ConfigError(
                f"{self.path}: no source named {name!r}; configured: {', '.join(self.sources) or 'none'}"
            )
        return self.sources[name]


def resolve_config_path(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser().resolve()
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser().resolve()
    return Path(DEFAULT_CONFIG_FILE).resolve()


# What to do about a missing config file, by who asked: the command line, or Spark (the catalog
# option that names the file).
CLI_CONFIG_HINT = "run `htap init` or pass --config / set " + CONFIG_ENV
SPARK_CONFIG_HINT = ("the Spark option spark.sql.catalog.<catalog>.config names it: point that at your htap.toml"
                     " (`htap spark-conf` prints every setting), or create the file with `htap --config {path} init`")


def load_config(path: str | os.PathLike | None = None, *, missing_hint: str = CLI_CONFIG_HINT) -> HtapConfig:
    """Read and validate a config file; every problem names the key and the file. `missing_hint`
    says what to do when there is no file (`{path}` is its path)."""
    p = resolve_config_path(path)
    if not p.is_file():
        raise ConfigError(f"no config file at {p}: {missing_hint.format(path=p)}")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    return parse_config(raw, p)


_cached: dict[Path, tuple[tuple[int, int, int], HtapConfig]] = {}


def cached_config(path: str | os.PathLike | None = None, *, missing_hint: str = CLI_CONFIG_HINT) -> HtapConfig:
    """`load_config` for long-lived processes that read the same file per call (the driver's
    catalog bridge, Spark's planning workers): parsed again only when the file changed (its
    inode, size or modification time), so an edit still takes effect on the next call."""
    p = resolve_config_path(path)
    try:
        st = p.stat()
    except OSError:
        return load_config(p, missing_hint=missing_hint)  # names the missing file
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _cached.get(p)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    cfg = load_config(p, missing_hint=missing_hint)
    _cached[p] = (stamp, cfg)
    return cfg


def parse_config(raw: dict, path: Path) -> HtapConfig:
    _check_keys(raw, {"replica", "sources", "service", "access"}, path, "")
    for section in ("replica", "sources"):
        if not isinstance(raw.get(section, {}), dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
    replica = raw.get("replica", {})
    _check_keys(replica, set(REPLICA_KEYS), path, "replica.")
    values = {k: replica.get(k, default) for k, (default, _) in REPLICA_KEYS.items()}
    base = path.parent
    warehouse: Path | str
    if is_url(values["warehouse"]):
        warehouse = str(values["warehouse"]).rstrip("/")
        if not warehouse.startswith(WAREHOUSE_SCHEMES) or len(warehouse) <= len("s3://"):
            raise ConfigError(
                f"{path}: replica.warehouse = {values['warehouse']!r}: use s3://bucket[/prefix] (any S3-compatible"
                f" store; endpoint in replica.s3_endpoint) or a local folder"
            )
    else:
        warehouse = (base / str(values["warehouse"])).resolve()
    if not values["metadata"]:
        metadata: Path | str = (base if isinstance(warehouse, str) else warehouse) / "metadata.db"
    elif is_postgres_location(values["metadata"]):
        metadata = str(values["metadata"])
    else:
        metadata = (base / str(values["metadata"])).resolve()
    numbers = {}
    for key, (default, _) in REPLICA_KEYS.items():
        if isinstance(default, (int, float)):
            numbers[key] = _replica_number(key, values[key], type(default), path)
    for key in ("s3_endpoint", "s3_region", "s3_access_key_id", "s3_secret_access_key", "cache_dir"):
        if not isinstance(values[key], str):
            raise ConfigError(f"{path}: replica.{key} must be a string, got {values[key]!r}")
    cache_dir = os.environ.get(CACHE_DIR_ENV) or values["cache_dir"] or "cache"
    object_store = ObjectStoreConfig(
        endpoint=values["s3_endpoint"], region=values["s3_region"], access_key_id=values["s3_access_key_id"],
        secret_access_key=values["s3_secret_access_key"], timeout_s=numbers.pop("s3_timeout_s"),
        retries=numbers.pop("s3_retries"), cache_dir=(base / cache_dir).resolve(), cache_bytes=numbers.pop("cache_bytes"),
    )
    sources = {}
    for name, sraw in raw.get("sources", {}).items():
        if not isinstance(sraw, dict):
            raise ConfigError(f"{path}: [sources.{name}] must be a table")
        kind = sraw.get("kind", "postgres")
        if kind not in CONFIG_CLASSES:
            raise ConfigError(f"{path}: sources.{name}.kind = {kind!r} is not supported; use one of {SOURCE_KINDS}")
        config_class = CONFIG_CLASSES[kind]
        # An unknown key is suggested and listed against this kind's keys only (a Postgres source's
        # typo is not answered with MySQL and Kafka settings).
        _check_keys({k: v for k, v in sraw.items() if k not in SOURCE_KEYS}, set(config_class.KEYS), path, f"sources.{name}.")
        for key in sraw:
            if key not in config_class.KEYS:
                raise ConfigError(
                    f"{path}: sources.{name}.{key} does not apply to kind {kind!r}; its keys: {', '.join(config_class.KEYS)}"
                )
        sources[name] = config_class.parse(name, sraw, path)
    return HtapConfig(
        path=path,
        warehouse=warehouse,
        metadata=metadata,
        sources=sources,
        service=parse_service(raw.get("service", {}), path),
        access=parse_access(raw.get("access", {}), path),
        object_store=object_store,
        **numbers,
    )


# Lowest value of each replica number the service can run with.
REPLICA_MINIMUM: dict[str, float] = {
    "flush_interval_s": 0, "flush_max_changes": 1, "partition_rows": 1, "window_s": 0, "pin_ttl_s": 0,
    "compaction_interval_s": 0, "compaction_min_bytes": 1, "max_deltas": 1, "source_range_rows": 1,
    "s3_timeout_s": 0.1, "s3_retries": 1, "cache_bytes": 1,
}


def _replica_number(key: str, value: object, kind: type, path: Path) -> int | float:
    """A replica setting as `kind` (int or float), inside the range the service can run with."""
    if isinstance(value, bool):
        raise ConfigError(f"{path}: replica.{key} must be a number, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: replica.{key} must be a number, got {value!r}") from e
    if kind is int and isinstance(value, float) and value != number:
        raise ConfigError(f"{path}: replica.{key} must be a whole number, got {value!r}")
    if key == "compaction_ratio" and not number > 1:
        # pick() grows the size limit by this factor until two deltas fit: at 1 or less it never does.
        raise ConfigError(
            f"{path}: replica.compaction_ratio must be greater than 1 (the growth of the compaction size tiers), got {number!r}"
        )
    low = REPLICA_MINIMUM.get(key)
    if low is not None and not number >= low:
        raise ConfigError(f"{path}: replica.{key} must be at least {low}, got {number!r}")
    return number


def _mysql_source(name: str, sraw: dict, path: Path) -> "MySQLConfig":
    """A MySQL/MariaDB source: a mysql:// dsn and/or separate keys (the keys win)."""
    from urllib.parse import unquote, urlsplit

    parts: dict[str, object] = {}
    dsn = sraw.get("dsn", "")
    if dsn:
        url = urlsplit(dsn)
        if url.scheme not in ("mysql", "mariadb"):
            raise ConfigError(f"{path}: sources.{name}.dsn must look like mysql://user:password@host:3306/database, got {dsn!r}")
        try:
            port = url.port
        except ValueError as e:
            raise ConfigError(f"{path}: sources.{name}.dsn has a bad port: {e}") from e
        parts = {
            "host": url.hostname or "",
            "port": port or "",
            "user": unquote(url.username or ""),
            "password": unquote(url.password or ""),
            "database": url.path.lstrip("/"),
        }
    values = {}
    for key in ("host", "port", "user", "password", "database", "server_id"):
        value = sraw.get(key, parts.get(key) or MYSQL_KEYS[key][0])
        default = MYSQL_KEYS[key][0]
        if isinstance(default, int):
            try:
                value = int(value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{path}: sources.{name}.{key} must be a number, got {value!r}") from e
        elif not isinstance(value, str):
            raise ConfigError(f"{path}: sources.{name}.{key} must be a string, got {value!r}")
        values[key] = value
    if not values["user"]:
        raise ConfigError(f"{path}: sources.{name}.user is required (or a dsn mysql://user:password@host:port/database)")
    if not 0 <= values["server_id"] < 2**32:
        raise ConfigError(f"{path}: sources.{name}.server_id must be between 1 and 4294967295")
    if not values["server_id"]:
        import zlib

        # Stable per source name, away from the small ids servers are usually given.
        values["server_id"] = 0x40000000 | (zlib.crc32(name.encode()) & 0x3FFFFFFF)
    return MySQLConfig(name=name, dsn=dsn, **values)


def _debezium_source(name: str, sraw: dict, path: Path) -> "DebeziumConfig":
    """A Debezium source: events from a file or folder (`path`) or from Kafka (`bootstrap_servers`)."""
    events, servers = sraw.get("path", ""), sraw.get("bootstrap_servers", "")
    if bool(events) == bool(servers):
        raise ConfigError(
            f"{path}: sources.{name} needs exactly one of path (a file or folder of Debezium events) "
            f"and bootstrap_servers (Kafka)"
        )
    topics = sraw.get("topics", [])
    if isinstance(topics, str) or not all(isinstance(t, str) for t in topics):
        raise ConfigError(f"{path}: sources.{name}.topics must be a list of topic names")
    if servers and not (sraw.get("topic_prefix") or topics):
        raise ConfigError(f"{path}: sources.{name}.topic_prefix (the connector's topic.prefix) or topics is required with Kafka")
    source_dsn = sraw.get("source_dsn", "")
    if not isinstance(source_dsn, str):
        raise ConfigError(f"{path}: sources.{name}.source_dsn must be a connection string, got {source_dsn!r}")
    return DebeziumConfig(
        name=name,
        source_dsn=source_dsn,
        path=str((path.parent / events).resolve()) if events else "",
        bootstrap_servers=servers,
        topic_prefix=sraw.get("topic_prefix", ""),
        topics=tuple(topics),
        group_id=sraw.get("group_id") or f"htap_{name}",
        unavailable_value_placeholder=sraw.get("unavailable_value_placeholder", DEBEZIUM_KEYS["unavailable_value_placeholder"][0]),
        session_timeout_ms=_positive_int(sraw, "session_timeout_ms", name, path),
    )


def _positive_int(sraw: dict, key: str, name: str, path: Path) -> int:
    value = sraw.get(key, DEBEZIUM_KEYS[key][0])
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{path}: sources.{name}.{key} must be a positive integer, got {value!r}")
    return value


def _check_keys(section: dict, known: set[str], path: Path, prefix: str) -> None:
    for key in section:
        if key not in known:
            hint = difflib.get_close_matches(key, sorted(known), n=1)
            did_you_mean = f"; did you mean '{prefix}{hint[0]}'?" if hint else f"; known keys: {', '.join(sorted(known))}"
            raise ConfigError(f"{path}: unknown config key '{prefix}{key}'{did_you_mean}")


def render_config(source_name: str, dsn: str, warehouse: str = "warehouse", kind: str = "postgres") -> str:
    """The text `htap init` writes: every key with its default and what it means."""
    lines = ["# spark-htap configuration (docs: reference/configuration). Tables are added with `htap tables add`.", "", "[replica]"]
    for key, (default, doc) in REPLICA_KEYS.items():
        value = warehouse if key == "warehouse" else default
        if key == "metadata" or (key in OBJECT_STORE_KEYS and not is_url(warehouse)):
            lines.append(f"# {key} = {_toml_value(value)}  # {doc}")
            continue
        lines.append(f"{key} = {_toml_value(value)}  # {doc}")
    lines += _commented_section("service  # how `htap serve` is watched (docs: Operations)", SERVICE_KEYS)
    lines += _commented_section("access  # who may read through Spark (docs: Operations, Access on a shared cluster)", ACCESS_KEYS)
    lines += ["", f"[sources.{_toml_key(source_name)}]", f"kind = {_toml_value(kind)}"]
    if kind not in CONFIG_CLASSES:
        raise ConfigError(f"kind {kind!r} is not supported; use one of {SOURCE_KINDS}")
    lines += [f"{key} = {_toml_value(value)}" for key, value in CONFIG_CLASSES[kind].init_keys(dsn).items()]
    return "\n".join(lines) + "\n"


def remove_source(text: str, name: str, path: Path) -> str:
    """The config text without the `[sources.<name>]` section (comments elsewhere kept)."""
    header = re.compile(r'^\s*\[\s*sources\s*\.\s*(?:"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+))\s*\]\s*(#.*)?$')
    out, skipping, found = [], False, False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            m = header.match(stripped)
            skipping = bool(m) and name in (m.group(1), m.group(2), m.group(3))
            found = found or skipping
        if not skipping:
            out.append(line)
    if not found:
        raise ConfigError(f"{path}: no section [sources.{name}] to remove; edit the file by hand")
    result = "".join(out).rstrip("\n") + "\n"
    parse_config(tomllib.loads(result), path)  # still a valid config
    return result


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_key(k: str) -> str:
    """A TOML key: bare when it can be, else quoted (so `my shop` or `a.b` stay one key)."""
    return k if _BARE_KEY.fullmatch(k) else _toml_value(k)


def _commented_section(header: str, keys: dict[str, tuple[object, str]]) -> list[str]:
    """A section `htap init` writes with every key commented out at its default: the defaults
    stay in the code, and a user uncomments what they change."""
    name, _, comment = header.partition("  # ")
    lines = ["", f"[{name}]  # {comment}; uncomment to change"]
    return lines + [f"# {key} = {_toml_value(default)}  # {doc}" for key, (default, doc) in keys.items()]


def _toml_value(v: object) -> str:
    if isinstance(v, str):
        return '"' + "".join(_toml_char(c) for c in v) + '"'
    return repr(v)


def _toml_char(c: str) -> str:
    """One character inside a TOML basic string (control characters must be escaped)."""
    if c in _TOML_ESCAPES:
        return _TOML_ESCAPES[c]
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\u{ord(c):04X}"
    return c
