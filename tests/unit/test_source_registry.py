"""connectors/registry.py: kind -> config class, source class and seq codec; the read side of
Debezium sources (source_dsn); drivers as extras with an error that names the extra."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from htap.conf import CONFIG_CLASSES, DebeziumConfig, MySQLConfig, PostgresConfig, parse_config
from htap.connectors import registry
from htap.errors import ConfigError, SourceError
from htap.seq import BINLOG, LSN, PLAIN

CFG = Path("/cfg/htap.toml")
# A branch on a source kind: `kind == "postgres"` (any registered kind's name) or `.kind in (...)`.
# (Other things named kind, a pushed join's type in htap.rewrite.pushed, are no source kinds.)
_KIND_NAMES = "|".join(re.escape(k) for k in registry.KINDS)
KIND_BRANCH = re.compile(rf"""\bkind\s*(==|!=)\s*["']({_KIND_NAMES})["']|\.kind\s+(not\s+)?in\s*[(\[{{]""")


def source(raw: dict):
    return parse_config({"sources": {"s": raw}}, CFG).source("s")


def test_the_registry_covers_every_config_class_and_nothing_else():
    assert set(registry.KINDS) == set(CONFIG_CLASSES)
    for kind, k in registry.KINDS.items():
        assert k.config is CONFIG_CLASSES[kind] and k.config.kind == kind


@pytest.mark.parametrize(
    "raw,cls,codec",
    [
        ({"dsn": "host=db"}, PostgresConfig, LSN),
        ({"kind": "mysql", "dsn": "mysql://u:p@db/x"}, MySQLConfig, BINLOG),
        ({"kind": "debezium", "path": "ev"}, DebeziumConfig, PLAIN),
        ({"kind": "debezium", "path": "ev", "source_dsn": "host=db dbname=x"}, DebeziumConfig, LSN),
        ({"kind": "debezium", "path": "ev", "source_dsn": "mysql://u:p@db:3307/x"}, DebeziumConfig, BINLOG),
    ],
)
def test_each_kind_has_its_config_class_and_codec(raw, cls, codec):
    s = source(raw)
    assert type(s) is cls and s.codec is codec


def test_debezium_source_dsn_names_the_origin():
    s = source({"kind": "debezium", "path": "ev", "source_dsn": "mysql://u:p@db:3307/x"})
    assert (type(s.origin), s.origin.host, s.origin.port, s.origin.user, s.origin.database) == (MySQLConfig, "db", 3307, "u", "x")
    assert type(source({"kind": "debezium", "path": "ev", "source_dsn": "host=db"}).origin) is PostgresConfig
    assert source({"kind": "debezium", "path": "ev"}).origin is None


def test_a_bad_source_dsn_fails_at_load_naming_the_key():
    with pytest.raises(ConfigError, match="dsn has a bad port"):
        source({"kind": "debezium", "path": "ev", "source_dsn": "mysql://u:p@db:port/x"})
    with pytest.raises(ConfigError, match="source_dsn must be a connection string"):
        source({"kind": "debezium", "path": "ev", "source_dsn": 5})


def test_a_debezium_source_without_source_dsn_says_what_to_configure():
    with pytest.raises(SourceError, match=r"set sources\.s\.source_dsn to the origin database"):
        registry.open_queryable(source({"kind": "debezium", "path": "ev"}))


def test_a_missing_driver_names_the_extra():
    """A kind whose driver module cannot be imported says which extra to install. (A driver name
    that does not exist, rather than hiding pymysql: whether pymysql is already imported depends
    on which tests ran before in the same process.)"""
    mysql = registry.source_kind("mysql")
    assert mysql.extra == "mysql" and "pymysql" in mysql.drivers
    missing = dataclasses.replace(mysql, drivers=("htap_test_no_such_driver",))
    with pytest.raises(SourceError, match=r"pip install 'spark-htap\[mysql\]'"):
        missing.source_class()


def test_kind_branches_live_only_in_the_registry():
    """No `kind == ...` outside conf/ and connectors/registry.py: adding a kind touches one place."""
    root = Path(registry.__file__).parents[1]  # the installed htap package (a tree of links when editable)
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("conf/") or rel == "connectors/registry.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if KIND_BRANCH.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []
