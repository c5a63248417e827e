"""Issue 15, operations: the [service] section, the retained-log warnings, health decisions
(no services: a SQLite metadata store in a temporary folder)."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from htap.app.metrics import health
from htap.conf import parse_config, render_config
from htap.conf.service import ServiceConfig
from htap.connectors.changes import Retention
from htap.errors import ConfigError
from htap.ingest.health import PHASE_COPYING, PHASE_STREAMING, ServiceState, check_retention
from htap.replica.metadata import MetadataStore

CFG = Path("/etc/htap/htap.toml")
PG = {"kind": "postgres", "dsn": "host=db user=r dbname=shop"}


def test_service_defaults_are_off_and_documented():
    cfg = parse_config({"sources": {"shop": PG}}, CFG)
    assert cfg.service == ServiceConfig()
    assert cfg.service.metrics_endpoint is None
    text = render_config("shop", "host=db")
    assert "\n[service]" in text and "# metrics_address" in text
    assert parse_config(tomllib.loads(text), CFG).service == ServiceConfig()  # what init writes is the default


def test_service_keys_parse():
    raw = {"metrics_address": "0.0.0.0:9464", "retained_wal_warning_bytes": 1 << 20, "source_check_interval_s": 1,
           "health_max_lag_s": 0}
    s = parse_config({"service": raw}, CFG).service
    assert s.metrics_endpoint == ("0.0.0.0", 9464)
    assert (s.retained_wal_warning_bytes, s.source_check_interval_s, s.health_max_lag_s) == (1 << 20, 1.0, 0.0)
    assert isinstance(s.source_check_interval_s, float)
    assert parse_config({"service": {"metrics_address": ":9464"}}, CFG).service.metrics_endpoint == ("127.0.0.1", 9464)
    tail = parse_config({"service": {"tail_address": "0.0.0.0:8815", "tail_secret": "s", "tail_bytes": 1 << 20}}, CFG)
    assert (tail.service.tail_address, tail.service.tail_secret, tail.service.tail_bytes) == ("0.0.0.0:8815", "s", 1 << 20)
    assert parse_config({"service": {"tail_address": ""}}, CFG).service.tail_address == ""  # off


@pytest.mark.parametrize("raw, message", [
    ({"metrics": "x"}, "unknown config key 'service.metrics'"),
    ({"metrics_address": "localhost"}, "service.metrics_address must look like"),
    ({"metrics_address": "h:70000"}, "service.metrics_address must look like"),
    ({"metrics_address": 9464}, "service.metrics_address must be a string"),
    ({"retained_wal_warning_bytes": -1}, "service.retained_wal_warning_bytes must be at least 0"),
    ({"retained_wal_warning_bytes": 1.5}, "must be a whole number"),
    ({"source_check_interval_s": 0}, "service.source_check_interval_s must be greater than 0"),
    ({"health_max_lag_s": True}, "service.health_max_lag_s must be a number"),
    ({"tail_address": "8815"}, "service.tail_address must look like"),
    ({"tail_secret": 42}, "service.tail_secret must be a string"),
    ({"tail_bytes": -1}, "service.tail_bytes must be at least 0"),
])
def test_service_errors_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config({"service": raw}, CFG)


def test_retained_log_warnings_once_per_crossing(caplog):
    cfg = parse_config({"sources": {"shop": PG}, "service": {"retained_wal_warning_bytes": 100}}, CFG)
    warned: set[str] = set()
    caplog.set_level(logging.INFO, logger="htap.ingest.health")
    for retained in (50, 150, 200, 80, 120):
        check_retention(cfg, "shop", Retention("slot s", retained, True, "reserved"), warned)
    over = [r for r in caplog.records if "more than service.retained_wal_warning_bytes" in r.message]
    assert len(over) == 2 and "max_slot_wal_keep_size" in over[0].message
    assert len([r for r in caplog.records if "back under" in r.message]) == 1
    caplog.clear()
    lost = Retention("slot s", None, False, "lost", lost="the slot was invalidated")
    for _ in range(3):
        check_retention(cfg, "shop", lost, warned)
    assert [r.levelname for r in caplog.records] == ["ERROR"] and "copies its tables again" in caplog.records[0].message


def test_health_needs_every_source_streaming(tmp_path):
    raw = {"replica": {"warehouse": str(tmp_path)}, "sources": {"a": PG, "b": PG}, "service": {"health_max_lag_s": 60}}
    cfg = parse_config(raw, tmp_path / "htap.toml")
    MetadataStore(cfg.metadata, create=True).close()
    state = ServiceState()
    state.phase("a", PHASE_STREAMING, "streaming 0 table(s)")
    state.phase("b", PHASE_COPYING, "copying public.t")
    h = health(cfg, state, now=1000.0)
    assert h.status == 503 and h.body["reasons"] == ["source b: copying: copying public.t"]
    state.phase("b", PHASE_STREAMING, "streaming 1 table(s)")
    assert health(cfg, state, now=1000.0).status == 200
    with MetadataStore(cfg.metadata) as store:
        store.commit_checkpoint("a", [], 5, 900.0)
    h = health(cfg, state, now=1000.0)
    assert h.status == 503 and "100 s old, more than service.health_max_lag_s = 60" in h.body["reasons"][0]
    assert health(cfg, state, now=950.0).status == 200
    state.observed("b", 990.0, Retention("slot b", lost="slot b was invalidated"))
    assert health(cfg, state, now=950.0).body["reasons"] == ["source b: slot b was invalidated"]
