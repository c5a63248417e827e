"""`[access]` (issue 15 item 7): the typed setting, and what a read without credentials is told.
The logins themselves run against real roles: tests/test_access_login.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from htap.conf import parse_config, render_config
from htap.conf.access import AccessConfig
from htap.errors import AccessError, ConfigError
from htap.pushdown.access import PASSWORD_ENV, Credentials, reader_role

CFG = Path("/etc/htap/htap.toml")
PG = {"kind": "postgres", "dsn": "host=db user=r dbname=shop"}


def parse(raw: dict):
    return parse_config({"sources": {"shop": PG}, **raw}, CFG)


def test_access_defaults_to_declared_and_takes_login():
    assert parse({}).access == AccessConfig("declared", 60.0)
    assert not parse({}).access.login_required
    cfg = parse({"access": {"mode": "login", "login_cache_s": 5}})
    assert cfg.access.login_required and cfg.access.login_cache_s == 5.0


@pytest.mark.parametrize("raw, message", [
    ({"mode": "open"}, "access.mode must be one of 'declared', 'login', got 'open'"),
    ({"mode": "login", "cache": 1}, "unknown config key 'access.cache'"),
    ({"login_cache_s": -1}, "access.login_cache_s must be a number of seconds >= 0"),
    ({"login_cache_s": True}, "access.login_cache_s must be a number"),
])
def test_bad_access_settings_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse({"access": raw})


def test_init_writes_the_access_section_commented_out():
    import tomllib

    text = render_config("shop", "host=db")
    assert '# mode = "declared"' in text
    assert parse_config(tomllib.loads(text), CFG).access == AccessConfig()


def test_declared_mode_trusts_the_user_option_as_given():
    cfg = parse({})
    assert reader_role(cfg, cfg.source(), Credentials()) is None
    assert reader_role(cfg, cfg.source(), Credentials("alice")) == "alice"


def test_login_mode_refuses_a_read_without_credentials_saying_what_to_set(monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    cfg = parse({"access": {"mode": "login"}})
    for creds, missing in ((Credentials(), "no user and password"), (Credentials("alice"), "no password")):
        with pytest.raises(AccessError) as e:
            reader_role(cfg, cfg.source(), creds)
        assert missing in str(e.value) and "spark.sql.catalog.<catalog>.user" in str(e.value)
        assert PASSWORD_ENV in str(e.value) and 'access.mode = "login"' in str(e.value)


def test_the_password_comes_from_the_option_then_the_file_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    secret = tmp_path / "pw"
    secret.write_text("from-file\nignored\n")
    assert Credentials.from_options("a", "from-option", str(secret)).password == "from-option"
    assert Credentials.from_options("a", None, str(secret)).password == "from-file"
    assert Credentials.from_options("a", None, None).password == "from-env"
    assert "from-option" not in repr(Credentials.from_options("a", "from-option", None))
    with pytest.raises(AccessError, match="password_file: cannot read"):
        Credentials.from_options("a", None, str(tmp_path / "missing"))
