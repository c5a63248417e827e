"""conf: parse_config / load_config / render_config."""

from __future__ import annotations

import tomllib
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.conf import (
    CONFIG_ENV,
    KIND_KEYS,
    OBJECT_STORE_KEYS,
    REPLICA_KEYS,
    SOURCE_KEYS,
    HtapConfig,
    MySQLConfig,
    is_postgres_location,
    load_config,
    parse_config,
    render_config,
    resolve_config_path,
)
from htap.errors import ConfigError

CFG = Path("/etc/htap/htap.toml")
PG = {"kind": "postgres", "dsn": "host=db user=r dbname=shop"}


def parse(raw: dict) -> HtapConfig:
    return parse_config(raw, CFG)


def error(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse(raw)
    return str(info.value)


# --- replica section ------------------------------------------------------------------------


def test_an_empty_file_is_all_defaults():
    cfg = parse({})
    assert cfg.path == CFG
    assert cfg.warehouse == Path("/etc/htap/warehouse")
    assert cfg.metadata == Path("/etc/htap/warehouse/metadata.db")
    assert cfg.sources == {}
    for key, (default, _doc) in REPLICA_KEYS.items():
        if key not in ("warehouse", "metadata", *OBJECT_STORE_KEYS):
            assert getattr(cfg, key) == default, key
            assert type(getattr(cfg, key)) is type(default), key
    assert (cfg.flush_interval_s, cfg.flush_max_changes, cfg.partition_rows, cfg.window_s, cfg.pin_ttl_s) == (
        0.5, 200_000, 1_000_000, 36_000.0, 60.0
    )
    assert (cfg.compaction_interval_s, cfg.compaction_min_bytes, cfg.compaction_ratio, cfg.max_deltas) == (5.0, 4 << 20, 4.0, 12)


def test_an_s3_warehouse_takes_its_typed_settings():
    cfg = parse({"replica": {"warehouse": "s3://bucket/some/prefix/", "s3_endpoint": "http://127.0.0.1:9000",
                             "s3_retries": 3, "s3_timeout_s": 2, "cache_bytes": 1 << 20, "cache_dir": "c"}})
    assert cfg.warehouse == "s3://bucket/some/prefix"
    assert cfg.metadata == Path("/etc/htap/metadata.db")  # never inside the bucket
    store = cfg.object_store
    assert (store.endpoint, store.retries, store.timeout_s, store.cache_bytes, store.cache_dir) == (
        "http://127.0.0.1:9000", 3, 2.0, 1 << 20, Path("/etc/htap/c"))
    assert parse({"replica": {"warehouse": "s3://b"}}).object_store.cache_dir == Path("/etc/htap/cache")


@pytest.mark.parametrize("replica, words", [
    ({"warehouse": "gs://bucket"}, "use s3://bucket"),
    ({"warehouse": "s3://"}, "use s3://bucket"),
    ({"s3_retries": 0}, "replica.s3_retries must be at least 1"),
    ({"s3_endpoint": 9000}, "replica.s3_endpoint must be a string"),
    ({"s3_endpont": "x"}, "s3_endpoint"),
])
def test_bad_object_store_settings_name_the_key(replica, words):
    with pytest.raises(ConfigError) as info:
        parse({"replica": replica})
    assert words in str(info.value)


def test_paths_are_relative_to_the_config_file():
    cfg = parse({"replica": {"warehouse": "../data/wh", "metadata": "meta/m.db"}})
    assert cfg.warehouse == Path("/etc/data/wh")
    assert cfg.metadata == Path("/etc/htap/meta/m.db")
    cfg = parse({"replica": {"warehouse": "/srv/wh"}})
    assert cfg.warehouse == Path("/srv/wh") and cfg.metadata == Path("/srv/wh/metadata.db")


@pytest.mark.parametrize("url", ["postgresql://u@h:5432/meta", "postgres://h/meta"])
def test_a_postgres_metadata_url_is_kept_as_text(url):
    assert parse({"replica": {"metadata": url}}).metadata == url
    assert is_postgres_location(url)


def test_is_postgres_location():
    assert not is_postgres_location(Path("/x/postgresql.db"))
    assert not is_postgres_location("mysql://h/x")


def test_numbers_are_converted_to_the_default_type():
    cfg = parse({"replica": {"flush_interval_s": 2, "flush_max_changes": "10", "window_s": "60"}})
    assert cfg.flush_interval_s == 2.0 and isinstance(cfg.flush_interval_s, float)
    assert cfg.flush_max_changes == 10 and isinstance(cfg.flush_max_changes, int)
    assert cfg.window_s == 60.0


@pytest.mark.parametrize("key,value", [("window_s", "an hour"), ("max_deltas", [3]), ("flush_max_changes", "1e3")])
def test_a_non_number_names_the_key(key, value):
    assert error({"replica": {key: value}}).endswith(f"replica.{key} must be a number, got {value!r}")


# --- unknown keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"replicas": {}}, "unknown config key 'replicas'; did you mean 'replica'?"),
        ({"source": {}}, "unknown config key 'source'; did you mean 'sources'?"),
        ({"zzz": 1}, "unknown config key 'zzz'; known keys: access, replica, service, sources"),
        ({"replica": {"flush_interval": 1}}, "unknown config key 'replica.flush_interval'; did you mean 'replica.flush_interval_s'?"),
        ({"replica": {"max_delta": 3}}, "unknown config key 'replica.max_delta'; did you mean 'replica.max_deltas'?"),
        ({"replica": {"qqq": 3}}, "unknown config key 'replica.qqq'; known keys: " + ", ".join(sorted(REPLICA_KEYS))),
        ({"sources": {"shop": {**PG, "dns": "x"}}}, "unknown config key 'sources.shop.dns'; did you mean 'sources.shop.dsn'?"),
        ({"sources": {"shop": {**PG, "slots": "x"}}}, "unknown config key 'sources.shop.slots'; did you mean 'sources.shop.slot'?"),
    ],
)
def test_unknown_keys_name_section_and_key_and_suggest(raw, message):
    assert error(raw) == f"{CFG}: {message}"


@pytest.mark.parametrize("kind", ["postgres", "mysql", "debezium"])
def test_an_unknown_source_key_lists_only_the_keys_of_its_kind(kind):
    assert error({"sources": {"s": {"kind": kind, "qqq": 1}}}) == (
        f"{CFG}: unknown config key 'sources.s.qqq'; known keys: {', '.join(sorted(KIND_KEYS[kind]))}"
    )


# --- sources: kinds and their keys ----------------------------------------------------------------


def test_postgres_source_defaults():
    cfg = parse({"sources": {"shop": {"dsn": "host=db"}}})
    s = cfg.source("shop")
    assert (s.name, s.kind, s.dsn, s.slot, s.publication) == ("shop", "postgres", "host=db", "htap_shop", "htap_shop")
    assert cfg.source() is s


def test_postgres_slot_and_publication():
    s = parse({"sources": {"shop": {**PG, "slot": "sl", "publication": "pub"}}}).source()
    assert (s.slot, s.publication) == ("sl", "pub")


def test_postgres_needs_a_dsn():
    assert error({"sources": {"shop": {"kind": "postgres"}}}).endswith("sources.shop.dsn is required (a libpq connection string)")
    assert "dsn is required" in error({"sources": {"shop": {"dsn": ""}}})


def test_unknown_kind():
    assert error({"sources": {"s": {"kind": "oracle", "dsn": "x"}}}).endswith(
        "sources.s.kind = 'oracle' is not supported; use one of ('postgres', 'mysql', 'debezium')"
    )


@pytest.mark.parametrize(
    "kind,key",
    [("postgres", "host"), ("postgres", "path"), ("mysql", "slot"), ("mysql", "topics"), ("debezium", "dsn"), ("debezium", "server_id")],
)
def test_keys_of_another_kind_are_errors_that_list_the_kinds_keys(kind, key):
    raw = {"kind": kind, key: SOURCE_KEYS[key][0] or "x"}
    assert error({"sources": {"s": raw}}).endswith(
        f"sources.s.{key} does not apply to kind {kind!r}; its keys: {', '.join(KIND_KEYS[kind])}"
    )


def test_every_source_key_belongs_to_some_kind():
    assert set(SOURCE_KEYS) == {k for keys in KIND_KEYS.values() for k in keys}


def test_a_source_must_be_a_table():
    assert error({"sources": {"s": "host=db"}}).endswith("[sources.s] must be a table")


# --- mysql ----------------------------------------------------------------------------------------


def mysql(**raw):
    return parse({"sources": {"my": {"kind": "mysql", **raw}}}).source("my")


def test_mysql_dsn():
    s = mysql(dsn="mysql://rep:s%40cret@db.example:3307/shop")
    assert (s.host, s.port, s.user, s.password, s.database) == ("db.example", 3307, "rep", "s@cret", "shop")
    assert s.dsn == "mysql://rep:s%40cret@db.example:3307/shop"
    assert isinstance(s, MySQLConfig) and not hasattr(s, "slot")  # per-kind config classes


def test_mysql_dsn_defaults_and_the_mariadb_scheme():
    s = mysql(dsn="mariadb://rep@db")
    assert (s.host, s.port, s.user, s.password, s.database) == ("db", 3306, "rep", "", "")


def test_mysql_separate_keys_win_over_the_dsn():
    s = mysql(dsn="mysql://a:b@h1:1/d1", host="h2", port="3308", user="c", password="p", database="d2")
    assert (s.host, s.port, s.user, s.password, s.database) == ("h2", 3308, "c", "p", "d2")


def test_mysql_without_dsn():
    s = mysql(user="rep")
    assert (s.host, s.port, s.user, s.dsn) == ("127.0.0.1", 3306, "rep", "")


def test_mysql_server_id_is_derived_from_the_source_name_and_stable():
    s = mysql(user="rep")
    assert s.server_id == 0x40000000 | (zlib.crc32(b"my") & 0x3FFFFFFF)
    assert 0x40000000 <= s.server_id < 2**31
    assert mysql(user="rep", server_id=4711).server_id == 4711


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"dsn": "postgres://rep@db/x"}, "sources.my.dsn must look like mysql://user:password@host:3306/database, got 'postgres://rep@db/x'"),
        ({"dsn": "mysql://rep@db:port/x"}, "sources.my.dsn has a bad port"),
        ({"dsn": "mysql://db:3306/x"}, "sources.my.user is required"),
        ({}, "sources.my.user is required"),
        ({"user": "rep", "port": "abc"}, "sources.my.port must be a number, got 'abc'"),
        ({"user": "rep", "server_id": -1}, "sources.my.server_id must be between 1 and 4294967295"),
        ({"user": "rep", "server_id": 2**32}, "sources.my.server_id must be between 1 and 4294967295"),
        ({"user": 5}, "sources.my.user must be a string, got 5"),
    ],
)
def test_mysql_errors(raw, message):
    assert message in error({"sources": {"my": {"kind": "mysql", **raw}}})


# --- debezium -------------------------------------------------------------------------------------


def debezium(**raw):
    return parse({"sources": {"cdc": {"kind": "debezium", **raw}}}).source("cdc")


def test_debezium_path_is_relative_to_the_config():
    s = debezium(path="events/")
    assert s.path == "/etc/htap/events"
    assert (s.bootstrap_servers, s.group_id, s.topics) == ("", "htap_cdc", ())
    assert s.unavailable_value_placeholder == "__debezium_unavailable_value"


def test_debezium_kafka():
    s = debezium(bootstrap_servers="b1:9092,b2:9092", topic_prefix="shop", group_id="g", unavailable_value_placeholder="??")
    assert (s.path, s.bootstrap_servers, s.topic_prefix, s.group_id, s.unavailable_value_placeholder) == (
        "", "b1:9092,b2:9092", "shop", "g", "??"
    )
    assert debezium(bootstrap_servers="b:9092", topics=["a.b.c", "x"]).topics == ("a.b.c", "x")


@pytest.mark.parametrize(
    "raw,message",
    [
        ({}, "sources.cdc needs exactly one of path (a file or folder of Debezium events) and bootstrap_servers (Kafka)"),
        ({"path": "e", "bootstrap_servers": "b:1"}, "needs exactly one of path"),
        ({"bootstrap_servers": "b:1"}, "sources.cdc.topic_prefix (the connector's topic.prefix) or topics is required with Kafka"),
        ({"bootstrap_servers": "b:1", "topics": "a.b.c"}, "sources.cdc.topics must be a list of topic names"),
        ({"path": "e", "topics": ["a", 1]}, "sources.cdc.topics must be a list of topic names"),
    ],
)
def test_debezium_errors(raw, message):
    assert message in error({"sources": {"cdc": {"kind": "debezium", **raw}}})


# --- choosing a source ----------------------------------------------------------------------------


def test_source_lookup():
    two = parse({"sources": {"a": PG, "b": PG}})
    assert two.source("b").name == "b"
    with pytest.raises(ConfigError, match=r"2 sources are configured \(a, b\); name one \(option `source`\)"):
        two.source()
    with pytest.raises(ConfigError, match="no source named 'c'; configured: a, b"):
        two.source("c")
    with pytest.raises(ConfigError, match=r"0 sources are configured \(none\)"):
        parse({}).source()


# --- files ----------------------------------------------------------------------------------------


def test_load_config_reads_the_file(tmp_path):
    p = tmp_path / "htap.toml"
    p.write_text('[replica]\nwindow_s = 60\n[sources.shop]\ndsn = "host=db"\n')
    cfg = load_config(p)
    assert cfg.path == p and cfg.window_s == 60.0 and cfg.warehouse == tmp_path / "warehouse"


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no config file at .*run `htap init` or pass --config / set HTAP_CONFIG"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[replica\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_config_path_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert resolve_config_path() == tmp_path / "htap.toml"
    monkeypatch.setenv(CONFIG_ENV, "conf/x.toml")
    assert resolve_config_path() == tmp_path / "conf" / "x.toml"
    assert resolve_config_path("y.toml") == tmp_path / "y.toml"  # explicit wins over the environment


def test_the_example_config_parses():
    import htap.conf

    example = Path(htap.conf.__file__).parent / "example.toml"
    cfg = load_config(example)
    assert cfg.source("shop").kind == "postgres"


# --- render_config --------------------------------------------------------------------------------


def rendered(source, dsn, warehouse="warehouse", kind="postgres") -> HtapConfig:
    return parse(tomllib.loads(render_config(source, dsn, warehouse, kind=kind)))


def test_render_config_round_trips_every_default():
    cfg = rendered("shop", "host=db user=r")
    assert cfg == parse({"sources": {"shop": {"dsn": "host=db user=r"}}})
    text = render_config("shop", "host=db user=r")
    for key in REPLICA_KEYS:
        assert key in text  # every key is written (metadata as a comment) with its meaning


def test_render_config_mysql():
    s = rendered("inv", "mysql://rep:pw@db:3307/inv", kind="mysql").source()
    assert (s.kind, s.host, s.port, s.user, s.password, s.database) == ("mysql", "db", 3307, "rep", "pw", "inv")


def test_render_config_debezium_file_and_kafka():
    s = rendered("cdc", "/data/events", kind="debezium").source()
    assert (s.kind, s.path, s.bootstrap_servers) == ("debezium", "/data/events", "")
    s = rendered("cdc", "kafka://b1:9092,b2:9092/shop", kind="debezium").source()
    assert (s.path, s.bootstrap_servers, s.topic_prefix) == ("", "b1:9092,b2:9092", "shop")


def test_render_config_escapes_quotes_and_backslashes():
    dsn = 'host=db password=\'a"b\\c\''
    assert rendered("shop", dsn, warehouse="C:\\wh").source().dsn == dsn


@PROPERTY
@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30))
def test_render_config_round_trips_any_dsn_text(dsn):
    assert rendered("shop", dsn).source("shop").dsn == dsn


@PROPERTY
@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20))
def test_render_config_round_trips_any_source_name(name):
    cfg = rendered(name, "host=db")
    assert list(cfg.sources) == [name]
    assert cfg.source(name).slot == f"htap_{name}"


@pytest.mark.parametrize("name", ["my shop", "a.b", "shop:1", "ünï", "x]"])
def test_render_config_quotes_source_names_that_are_not_bare_keys(name):
    text = render_config(name, "host=db")
    assert list(parse(tomllib.loads(text)).sources) == [name]


def test_render_config_escapes_control_characters():
    dsn = "host=db\noptions='-c a=b'\t\x7f\x00"
    assert rendered("shop", dsn).source().dsn == dsn


# --- values the service cannot run with ---------------------------------------------------------


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("compaction_ratio", 1, "replica.compaction_ratio must be greater than 1 (the growth of the compaction size tiers), got 1.0"),
        ("compaction_ratio", 0.5, "replica.compaction_ratio must be greater than 1"),
        ("compaction_ratio", float("nan"), "replica.compaction_ratio must be greater than 1"),
        ("compaction_min_bytes", 0, "replica.compaction_min_bytes must be at least 1, got 0"),
        ("max_deltas", 0, "replica.max_deltas must be at least 1, got 0"),
        ("partition_rows", 0, "replica.partition_rows must be at least 1, got 0"),
        ("flush_max_changes", -5, "replica.flush_max_changes must be at least 1, got -5"),
        ("window_s", -1, "replica.window_s must be at least 0, got -1.0"),
        ("flush_interval_s", -0.5, "replica.flush_interval_s must be at least 0, got -0.5"),
        ("max_deltas", True, "replica.max_deltas must be a number, got True"),
        ("flush_max_changes", 1.5, "replica.flush_max_changes must be a whole number, got 1.5"),
    ],
)
def test_out_of_range_numbers_name_the_key(key, value, message):
    assert message in error({"replica": {key: value}})


def test_whole_floats_are_accepted_for_integer_keys():
    assert parse({"replica": {"flush_max_changes": 1e5}}).flush_max_changes == 100_000


def test_a_compaction_interval_of_zero_disables_compaction_and_is_allowed():
    assert parse({"replica": {"compaction_interval_s": 0}}).compaction_interval_s == 0.0


@pytest.mark.parametrize("raw,message", [({"replica": 5}, "[replica] must be a table"), ({"sources": "shop"}, "[sources] must be a table")])
def test_sections_must_be_tables(raw, message):
    assert error(raw) == f"{CFG}: {message}"
