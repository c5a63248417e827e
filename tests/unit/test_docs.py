"""The docs site: its generated references list everything the code accepts, and it builds.

The configuration and CLI references are generated from the config model and the argparse
parser (docs/generate.py); these tests hold the generator to the code, so a key or a command
added without a line in the docs still shows up there, and a broken page fails `make test`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from htap.conf import parse_config
from htap.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _generate():
    spec = importlib.util.spec_from_file_location("htap_docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generate()


def test_configuration_reference_lists_every_key_the_config_model_accepts():
    from htap.conf import CONFIG_CLASSES, REPLICA_KEYS
    from htap.conf.access import ACCESS_KEYS
    from htap.conf.service import SERVICE_KEYS

    expected = {f"replica.{k}" for k in REPLICA_KEYS} | {f"service.{k}" for k in SERVICE_KEYS}
    expected |= {f"access.{k}" for k in ACCESS_KEYS}
    for cls in CONFIG_CLASSES.values():
        expected |= {f"sources.<name>.{k}" for k in cls.KEYS}
    assert generate.model_keys() == expected

    page = generate.config_reference()
    listed = set(re.findall(r"^\| `([a-z0-9_<>.]+)` \|", page, flags=re.M))
    assert listed == expected, f"missing: {sorted(expected - listed)}, unknown: {sorted(listed - expected)}"
    for kind in CONFIG_CLASSES:
        assert f"of kind `{kind}`" in page


def test_the_model_tables_are_what_the_loader_validates_against(tmp_path):
    """Every listed key is accepted by the loader, and a key not listed is refused: the tables
    the reference is generated from are the loader's own."""
    path = tmp_path / "htap.toml"
    raw = tomllib.loads('[replica]\nwarehouse = "w"\n[sources.s]\nkind = "postgres"\ndsn = "host=x"\n')
    parse_config(raw, path)
    for section in ("replica", "service", "access"):
        with pytest.raises(ConfigError, match=f"unknown config key '{section}.no_such_key'"):
            parse_config({**raw, section: {**raw.get(section, {}), "no_such_key": 1}}, path)
    with pytest.raises(ConfigError, match="unknown config key"):
        parse_config({**raw, "no_such_section": {}}, path)
    # Every key with its documented default parses (type and range of the defaults agree).
    from htap.conf import CONFIG_CLASSES, REPLICA_KEYS
    from htap.conf.access import ACCESS_KEYS
    from htap.conf.service import SERVICE_KEYS

    full = {
        "replica": {k: d for k, (d, _) in REPLICA_KEYS.items() if d != ""},
        "service": {k: d for k, (d, _) in SERVICE_KEYS.items()},
        "access": {k: d for k, (d, _) in ACCESS_KEYS.items()},
        "sources": {"s": {"kind": "postgres", "dsn": "host=x"}},
    }
    parse_config(full, path)
    assert set(generate.model_keys()) >= {f"sources.<name>.{k}" for c in CONFIG_CLASSES.values() for k in c.KEYS}


def test_cli_reference_lists_every_subcommand():
    import argparse

    from htap.app.cli import build_parser

    def walk(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield path + (name,)
                    yield from walk(sub, path + (name,))

    commands = {" ".join(p) for p in walk(build_parser())}
    assert {"init", "tables add", "serve", "status", "spark-conf", "verify data", "verify replay", "demo"} <= commands
    page = generate.cli_reference()
    headings = set(re.findall(r"^#+ htap (.+)$", page, flags=re.M))
    assert headings == commands, f"missing: {sorted(commands - headings)}"
    for command in commands:
        assert f"usage: htap {command}" in page


def test_benchmark_pages_come_from_the_results():
    files = generate.bench_files()
    assert {"benchmarks/tpch.md", "benchmarks/freshness.md", "benchmarks/storage.md", "benchmarks/more.md"} <= set(files)
    pages = "".join(content for name, content in files.items() if name.endswith(".md"))
    for name, content in files.items():
        if name.endswith(".png"):
            assert content[:8] == b"\x89PNG\r\n\x1a\n"
            assert f"]({Path(name).name})" in pages, f"{name} is shown on no page"
    assert (ROOT / "docs" / "img" / "tpch-sf1.png").is_file(), "README's figure: make docs-figure"


def test_mkdocs_build_strict(tmp_path):
    """`make docs` in a temporary folder: warnings (a broken link, a page missing from the nav,
    a bad anchor) are errors. Needs no network."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    for page in ("index.html", "reference/configuration/index.html", "reference/cli/index.html",
                 "benchmarks/tpch/index.html", "benchmarks/tpch-sf1-ratios.png", "search/search_index.json"):
        assert (site / page).is_file(), page
