"""The `htap` command line's own texts: help, how to run it, the installed package's data files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from htap.app.cli import build_parser, htap_command
from htap.catalog.shim import JAVA_SOURCES


def test_htap_command_is_the_script_path_when_path_does_not_find_it(monkeypatch, tmp_path):
    script = Path(sys.executable).parent / "htap"
    if not script.is_file():
        pytest.skip("no htap script beside this Python")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert Path(htap_command()).resolve() == script.resolve()
    monkeypatch.setenv("PATH", str(script.parent))
    assert htap_command() == "htap"


def _commands(parser):
    import argparse

    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


@pytest.mark.parametrize("command", ["init", "serve", "status", "spark-conf", "recover"])
def test_every_command_has_a_description(command, capsys):
    parser = _commands(build_parser())[command]
    assert parser.description and len(parser.description) > 40
    parser.print_help()
    assert parser.description.split()[0] in capsys.readouterr().out


def test_top_level_help_names_every_source_kind(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Postgres" in text and "MySQL" in text and "Debezium" in text


def test_the_installed_package_has_the_java_sources_and_the_replay_samples():
    assert len(list(JAVA_SOURCES.rglob("*.java"))) > 10
    import htap.verify

    assert (Path(htap.verify.__file__).parent / "samples" / "tpch_queries.sql").is_file()


def test_every_exception_class_of_ours_is_an_htap_error():
    """One root (STYLE: one exception root): every Exception subclass defined in an htap module."""
    import importlib
    import pkgutil

    import htap
    from htap.errors import HtapError

    found = []
    for info in pkgutil.walk_packages(htap.__path__, "htap."):
        if info.name.startswith(("htap.catalog.java", "htap.verify.samples")):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name:
                found.append(value)
    assert len(found) > 20
    assert [c.__qualname__ for c in found if not issubclass(c, HtapError)] == []
