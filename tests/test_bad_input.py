"""Issue 2: bad input gets a one-line error that says what is wrong and what to do."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import HTAP
from services import free_port


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_unknown_table(workspace):
    msg = one_line_error(workspace.htap("tables", "add", f"{workspace.schema}.nope", check=False))
    assert "does not exist in the source" in msg


def test_table_without_primary_key(workspace):
    workspace.sql(f"CREATE TABLE {workspace.schema}.nokey (a int, b text)")
    msg = one_line_error(workspace.htap("tables", "add", f"{workspace.schema}.nokey", check=False))
    assert "has no primary key" in msg and "ADD PRIMARY KEY" in msg


def test_unsupported_column_type(workspace):
    workspace.sql(f"CREATE TABLE {workspace.schema}.geo (id int PRIMARY KEY, p point)")
    msg = one_line_error(workspace.htap("tables", "add", f"{workspace.schema}.geo", check=False))
    assert "'point' is not supported" in msg


def test_table_added_twice(workspace):
    workspace.sql(f"CREATE TABLE {workspace.schema}.twice (id int PRIMARY KEY)")
    workspace.htap("tables", "add", f"{workspace.schema}.twice")
    msg = one_line_error(workspace.htap("tables", "add", f"{workspace.schema}.twice", check=False))
    assert "already an HTAP table" in msg


def test_wrong_dsn(tmp_path):
    r = subprocess.run(
        [*HTAP, "--config", str(tmp_path / "h.toml"), "init", "--dsn", "host=127.0.0.1 port=1 user=postgres dbname=test"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    msg = one_line_error(r)
    assert "cannot connect to Postgres" in msg and "check the source's dsn" in msg


def test_wal_level_other_than_logical(tmp_path):
    import shutil
    import tempfile
    from pathlib import Path

    from htap import localpg

    # The server runs as the postgres user, which cannot enter pytest's private tmp folders.
    data = Path(tempfile.mkdtemp(prefix="htap-test-pg-"))
    data.chmod(0o755)
    dsn = localpg.start(data, port=free_port(), wal_level="replica")
    try:
        r = subprocess.run([*HTAP, "--config", str(tmp_path / "h.toml"), "init", "--dsn", dsn],
                           capture_output=True, text=True, cwd=tmp_path)
        msg = one_line_error(r)
        assert "wal_level is 'replica'" in msg and "ALTER SYSTEM SET wal_level = 'logical'" in msg
    finally:
        localpg.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_unknown_config_key(workspace):
    text = workspace.config.read_text().replace("flush_interval_s", "flush_intervall_s")
    workspace.config.write_text(text)
    msg = one_line_error(workspace.htap("status", check=False))
    assert "unknown config key 'replica.flush_intervall_s'" in msg
    assert "did you mean 'replica.flush_interval_s'" in msg


def test_missing_config(tmp_path):
    r = subprocess.run([*HTAP, "--config", str(tmp_path / "none.toml"), "status"], capture_output=True, text=True, cwd=tmp_path)
    assert "run `htap init`" in one_line_error(r)


def test_no_jdk(tmp_path):
    from htap.conf import render_config

    (tmp_path / "htap.toml").write_text(render_config("main", "host=127.0.0.1 dbname=test", "warehouse"))
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "HTAP_CONFIG")}
    env.update(PATH=str(tmp_path), HTAP_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([*HTAP, "--config", str(tmp_path / "htap.toml"), "spark-conf"], capture_output=True, text=True, env=env, cwd=tmp_path)
    msg = one_line_error(r)
    assert "no Java compiler (javac) found" in msg and "openjdk-17-jdk-headless" in msg

    env["JAVA_HOME"] = str(tmp_path)
    msg = one_line_error(subprocess.run([*HTAP, "spark-conf"], capture_output=True, text=True, env=env, cwd=tmp_path))
    assert f"JAVA_HOME={tmp_path} has no bin/javac" in msg


def test_spark_conf_without_a_config_file_is_an_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HTAP_CONFIG"}
    msg = one_line_error(subprocess.run([*HTAP, "spark-conf"], capture_output=True, text=True, env=env, cwd=tmp_path))
    assert f"no config file at {tmp_path.resolve() / 'htap.toml'}" in msg and "run `htap init`" in msg


def test_spark_conf_names_the_catalog_after_the_source(workspace):
    out = workspace.htap("spark-conf").stdout
    assert f"--conf spark.sql.catalog.{workspace.source}=io.sparkhtap.HtapCatalog" in out
    assert f"--conf spark.sql.catalog.{workspace.source}.config={workspace.config.resolve()}" in out
    out = workspace.htap("spark-conf", "--catalog", "lake").stdout
    assert "--conf spark.sql.catalog.lake=io.sparkhtap.HtapCatalog" in out and "FROM lake.<schema>.<table>" in out


def test_spark_unknown_table_and_unknown_catalog_option(workspace, spark, catalog):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {catalog}.{workspace.schema}.nope").collect()

    bad = catalog + "_bad"
    spark.conf.set(f"spark.sql.catalog.{bad}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{bad}.confg", str(workspace.config))
    with pytest.raises(Exception, match=rf"Unknown option spark.sql.catalog.{bad}.confg"):
        spark.sql(f"SELECT * FROM {bad}.{workspace.schema}.t").collect()


def test_spark_names_a_source_table_that_is_not_an_htap_table_and_how_to_add_it(workspace, spark, catalog):
    workspace.sql(f"CREATE TABLE {workspace.schema}.plain (id int PRIMARY KEY)")
    with pytest.raises(Exception) as info:
        spark.sql(f"SELECT * FROM {catalog}.{workspace.schema}.plain")
    msg = str(info.value)
    assert f"{workspace.schema}.plain is a table of source {workspace.source} but not an HTAP table" in msg
    assert f"tables add {workspace.schema}.plain" in msg and "TABLE_OR_VIEW_NOT_FOUND" not in msg


def _bad_catalog(spark, name: str, **options: str) -> str:
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    for key, value in options.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
    return name


def test_spark_checks_catalog_options_when_the_catalog_starts(workspace, spark):
    # Analysis (spark.sql without an action) initializes the catalog: the error comes there, and names
    # the option, its value and the values it takes, not a failed read plan at execution.
    bad = _bad_catalog(spark, f"r_{workspace.source}", config=str(workspace.config), route="replicaa")
    with pytest.raises(Exception) as info:
        spark.sql(f"SELECT * FROM {bad}.{workspace.schema}.t")
    msg = str(info.value)
    assert f"spark.sql.catalog.{bad}.route = 'replicaa' is not a route: use one of auto, replica, source" in msg
    assert "could not plan" not in msg

    bad = _bad_catalog(spark, f"s_{workspace.source}", config=str(workspace.config), source="nope")
    with pytest.raises(Exception, match=rf"spark.sql.catalog.{bad}.source: .*no source named 'nope'"):
        spark.sql(f"SELECT * FROM {bad}.{workspace.schema}.t")

    bad = _bad_catalog(spark, f"q_{workspace.source}", config=str(workspace.config), as_of_seq="yesterday")
    with pytest.raises(Exception, match=rf"spark.sql.catalog.{bad}.as_of_seq = 'yesterday': give a seq"):
        spark.sql(f"SELECT * FROM {bad}.{workspace.schema}.t")


def test_spark_names_its_own_option_for_a_missing_config_file(workspace, spark, tmp_path):
    missing = tmp_path / "gone.toml"
    bad = _bad_catalog(spark, f"m_{workspace.source}", config=str(missing))
    with pytest.raises(Exception) as info:
        spark.sql(f"SELECT * FROM {bad}.{workspace.schema}.t")
    msg = str(info.value)
    assert f"no config file at {missing}" in msg and f"spark.sql.catalog.{bad}.config" in msg
    assert f"htap --config {missing} init" in msg and "HTAP_CONFIG" not in msg


def test_tables_add_takes_several_tables_and_a_whole_schema(workspace):
    ws, s = workspace, workspace.schema
    for t in ("a", "c"):
        ws.sql(f"CREATE TABLE {s}.{t} (id int PRIMARY KEY, v text)")
    ws.sql(f"CREATE TABLE {s}.b (v text)")  # no primary key
    r = ws.htap("tables", "add", f"{s}.a", f"{s}.c")
    assert f"added {s}.a (key: id)" in r.stdout and f"added {s}.c (key: id)" in r.stdout and r.stderr == ""

    # The schema: the tables not added yet, each on its own line; one that cannot be added is an
    # error line (and exit status 2) while the others are still added.
    ws.sql(f"CREATE TABLE {s}.d (k bigint PRIMARY KEY)")
    r = ws.htap("tables", "add", "--schema", s, check=False)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"{s}.b has no primary key" in line
    assert f"schema {s}: 4 table(s), 2 already HTAP tables" in r.stdout and f"added {s}.d (key: k)" in r.stdout
    with ws.store() as store:
        assert {t.qualified_name for t in store.list_tables(ws.source)} == {f"{s}.a", f"{s}.c", f"{s}.d"}

    # Named tables: an HTAP table already, or a missing one, is an error; the rest are added.
    ws.sql(f"CREATE TABLE {s}.e (id int PRIMARY KEY)")
    r = ws.htap("tables", "add", f"{s}.a", f"{s}.e", f"{s}.nope", check=False)
    assert r.returncode == 2 and f"added {s}.e" in r.stdout
    assert f"{s}.a is already an HTAP table" in r.stderr and f"{s}.nope does not exist in the source" in r.stderr
    msg = one_line_error(ws.htap("tables", "add", "--schema", "no_such_schema", check=False))
    assert "schema no_such_schema of source" in msg and "has no tables" in msg


def test_a_read_that_cannot_be_planned_is_one_typed_line(workspace, spark):
    # The bridge plans the read; its exit code types the error (IllegalArgumentException here), the
    # message is ours alone: no marker, no "could not plan" wrapper, no Python traceback.
    workspace.sql(f"CREATE TABLE {workspace.schema}.waiting (id int PRIMARY KEY)")
    workspace.htap("tables", "add", f"{workspace.schema}.waiting")  # never copied: no service runs
    cat = _bad_catalog(spark, f"w_{workspace.source}", config=str(workspace.config), route="replica")
    from pyspark.errors import IllegalArgumentException

    with pytest.raises(IllegalArgumentException) as info:
        spark.sql(f"SELECT * FROM {cat}.{workspace.schema}.waiting").collect()
    assert str(info.value) == (f"{workspace.schema}.waiting: the catalog requires the replica (route=replica),"
                               " but the replica is pending")
