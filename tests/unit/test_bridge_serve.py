"""The catalog bridge's serving loop (`python -m htap.catalog.bridge --serve`, one per Spark
driver): one JSON answer line per request line, with the exit code, stdout and stderr a
one-shot call would have; a failing call is an answer, not the end; the end of its input (the
driver exited) ends it. The Java side (Bridge.java) is tested against Spark in
tests/test_bridge_daemon.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

from htap.catalog import bridge
from htap.conf import render_config
from htap.replica.metadata import MetadataStore
from htap.replica.models import Column


def make_store(tmp: Path) -> Path:
    config = tmp / "htap.toml"
    config.write_text(render_config("shop", "host=127.0.0.1 dbname=none"))
    (tmp / "warehouse").mkdir()
    with MetadataStore(tmp / "warehouse" / "metadata.db", create=True) as store:
        store.add_table("shop", "public", "t", [Column("id", "integer", False)], ["id"], "schema")
    return config


def serve(*requests) -> list[dict]:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in requests]
    out = io.StringIO()
    assert bridge.serve(io.StringIO("\n".join(lines) + "\n"), out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_answers_like_one_shot_calls_and_survives_errors(tmp_path):
    config = str(make_store(tmp_path))
    answers = serve(
        {"argv": ["--config", config, "list-tables", "public"]},
        {"argv": ["--config", config, "set-property", "public.t", "htap.failover", "maybe"]},
        {"argv": ["--config", config, "set-property", "public.nope", "htap.failover", "true"]},
        {"argv": ["--config", config, "no-such-command"]},
        "not json",
        {"argv": ["--config", config, "set-property", "public.t", "htap.failover", "true"]},
        {"argv": ["--config", config, "renew-leases", "owner-1"]},
    )
    assert [a["code"] for a in answers] == [0, bridge.EXIT_ERROR, bridge.EXIT_NO_SUCH_TABLE, bridge.EXIT_ERROR,
                                            bridge.EXIT_BUG, 0, 0]
    assert json.loads(answers[0]["out"]) == [["public", "t"]]
    assert "htap.failover takes 'true' or 'false'" in answers[1]["err"]
    assert "invalid choice: 'no-such-command'" in answers[3]["err"]
    assert "JSONDecodeError" in answers[4]["err"]  # a bug's traceback, and the loop goes on
    with MetadataStore(tmp_path / "warehouse" / "metadata.db") as store:
        assert store.get_table("shop", "public", "t").failover
    assert json.loads(answers[6]["out"])["renewed"] == 0


def test_a_changed_config_is_read_again(tmp_path):
    config = make_store(tmp_path)
    argv = {"argv": ["--config", str(config), "list-tables"]}
    assert serve(argv)[0]["code"] == 0
    config.write_text(config.read_text().replace("[replica]", "[replica]\nbogus_key = 1"))
    answer = serve(argv)[0]
    assert answer["code"] == bridge.EXIT_ERROR and "bogus_key" in answer["err"]
