"""Issue 15, operations: `htap serve`'s metrics and health endpoint, fetched over HTTP (as
curl would) from a service streaming a private Postgres. Every figure is checked against the
metadata store and the source, read just before and just after the scrape (figures move while
the service runs, so each must lie between the two readings: no timing assumptions)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from htap.conf import load_config, remove_source

from conftest import wait_until
from services import free_port
from test_object_store import s3_workspace, set_replica_keys  # noqa: F401 - the fixture


def set_service(ws, **keys) -> None:
    """Put `keys` into the config's [service] section (`htap init` writes it with its keys commented out)."""
    lines = ws.config.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[service]"))
    values = [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    ws.config.write_text("\n".join(lines[: at + 1] + values + lines[at + 1:]) + "\n")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError:
        return 0, ""  # not listening yet


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    status, text = get(url + "/metrics")
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def readings(ws, names):
    with ws.store() as store:
        tables = {n: store.get_table(ws.source, ws.schema, n) for n in names}
        stats = {n: store.delta_stats(t.id) for n, t in tables.items()}
        return tables, stats, store.source_position(ws.source), store.source_position_time(ws.source)


def test_metrics_and_health_over_http(workspace):
    ws = workspace
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    set_service(ws, metrics_address=f"127.0.0.1:{port}", source_check_interval_s=0.2)
    # A second source whose server is down: the service is up, but not healthy, and says why.
    ws.config.write_text(ws.config.read_text() + '\n[sources.down]\nkind = "postgres"\n'
                         f'dsn = "host=127.0.0.1 port={free_port()} user=postgres dbname=postgres connect_timeout=2"\n')
    names = ["a", "b"]
    for n in names:
        ws.sql(f"CREATE TABLE {ws.schema}.{n} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {ws.schema}.{n} SELECT g, 'v' || g FROM generate_series(1, 50) g")
        ws.htap("tables", "add", f"{ws.schema}.{n}", "--source", ws.source)

    ws.start_service()
    for n in names:
        ws.wait_readable(n)

    def down_only():
        status, body = get(url + "/health")
        if status != 503:
            return None
        phases = {name: s["phase"] for name, s in json.loads(body)["sources"].items()}
        return phases == {ws.source: "streaming", "down": "retrying"} and json.loads(body)

    health = wait_until(down_only, None, "health to show the first source streaming and the second one down")
    (reason,) = health["reasons"]
    assert reason.startswith("source down: retrying: ") and "cannot connect" in reason, reason
    first = scrape(url)
    for n in names:  # this process copied both tables, once each
        assert first[("htap_copy_seconds_count", frozenset({("source", ws.source), ("table", f"{ws.schema}.{n}")}))] == 1
    assert first[("htap_source_up", frozenset({("source", "down")}))] == 0
    ws.stop_service()
    ws.config.write_text(remove_source(ws.config.read_text(), "down", ws.config))

    ws.start_service()
    wait_until(lambda: get(url + "/health")[0] == 200, None, "the health endpoint to answer 200")
    ws.sql(f"UPDATE {ws.schema}.a SET v = 'changed' WHERE id <= 10")
    ws.sql(f"DELETE FROM {ws.schema}.b WHERE id > 40")
    for n in names:
        ws.wait_caught_up(n)
    # The watcher has asked the source since (the first observation comes before the slot streams).
    wait_until(lambda: scrape(url).get(("htap_source_slot_wal_status", frozenset({("source", ws.source), ("status", "reserved")}))),
               None, "the slot's wal_status in the metrics")

    asked = time.time()
    before_lsn = ws.source_seq()
    before, before_stats, before_pos, before_at = readings(ws, names)

    def fresh_scrape():
        # One whose source figures were asked after the readings above.
        t0 = time.time()
        m = scrape(url)
        t1 = time.time()
        return m[("htap_source_observed_timestamp_seconds", frozenset({("source", ws.source)}))] >= asked and (t0, m, t1)

    t0, m, t1 = wait_until(fresh_scrape, None, "the watcher to ask the source again")
    after, after_stats, after_pos, after_at = readings(ws, names)
    after_lsn = ws.source_seq()

    def value(name, **labels):
        return m[(name, frozenset(labels.items()))]

    eps = 1e-3  # the exposition prints floats with repr: exact, but clocks are read at different moments
    for n in names:
        table = {"source": ws.source, "table": f"{ws.schema}.{n}"}
        assert before[n].max_safe_seq <= value("htap_table_max_safe_seq", **table) <= after[n].max_safe_seq
        safe_time = value("htap_table_max_safe_timestamp_seconds", **table)
        assert before[n].max_safe_time <= safe_time <= after[n].max_safe_time
        freshness = value("htap_table_freshness_seconds", **table)
        assert freshness >= 0 and t0 - eps <= safe_time + freshness <= t1 + eps
        assert (value("htap_table_deltas", **table), value("htap_table_row_versions", **table),
                value("htap_table_bytes", **table)) in (before_stats[n], after_stats[n])
        assert value("htap_table_state", **table, state="streaming") == 1
        assert value("htap_table_state", **table, state="failed") == 0
        assert value("htap_table_partitions", **table) in (len(before[n].layout.ids), len(after[n].layout.ids))
    src = {"source": ws.source}
    assert before_pos <= value("htap_source_durable_position", **src) <= after_pos
    lag_s = value("htap_source_lag_seconds", **src)
    assert before_at <= t1 - lag_s + eps and t0 - lag_s - eps <= after_at
    # Lag in bytes: the log written after the durable position the watcher last saw.
    assert 0 <= value("htap_source_lag_bytes", **src) <= after_lsn - before_pos
    assert value("htap_source_retained_wal_bytes", **src) > 0
    assert value("htap_source_retained_wal_warning_bytes", **src) == 1 << 30
    assert value("htap_source_up", **src) == 1 and value("htap_source_phase", **src, phase="streaming") == 1
    assert value("htap_source_log_lost", **src) == 0
    assert value("htap_source_stream_delay_seconds", **src) >= 0  # the updates above reached the stream
    assert before_lsn <= after_lsn
    # Durations of the service's work.
    assert value("htap_checkpoint_seconds_count", **src) >= 1
    assert not [k for k in m if k[0].startswith("htap_cache_")], "a local warehouse has no cache"

    health = json.loads(get(url + "/health")[1])
    assert health["status"] == "ok" and health["reasons"] == []
    assert health["sources"][ws.source]["phase"] == "streaming"
    assert health["sources"][ws.source]["tables"] == {"streaming": 2}
    assert get(url + "/nothing")[0] == 404

    # An address already in use is refused before anything starts, naming the key.
    r = ws.htap("serve", check=False)
    assert r.returncode != 0 and "service.metrics_address" in r.stderr and "cannot listen" in r.stderr


def test_the_cache_of_an_s3_warehouse_in_the_metrics(s3_workspace):
    """The service's cache in front of the bucket: with a limit of one byte every file it
    uploads evicts the one before, so compaction fetches its inputs back from the store."""
    ws = s3_workspace
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    set_service(ws, metrics_address=f"127.0.0.1:{port}")
    set_replica_keys(ws.config, {"cache_bytes": 1, "compaction_interval_s": 0.5})
    t = f"{ws.schema}.c"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 200) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("c")
    labels = frozenset({("warehouse", str(load_config(ws.config).warehouse))})
    rounds = iter(range(10**6))

    def fetched_back():
        ws.sql(f"UPDATE {t} SET v = 'round {next(rounds)}' WHERE id % 5 = 0")  # one more checkpoint
        ws.wait_caught_up("c")
        m = scrape(url)
        return m[("htap_cache_misses_total", labels)] > 0 and m[("htap_cache_evictions_total", labels)] > 0 and m

    m = wait_until(fetched_back, None, "compaction to fetch an evicted delta from the bucket", interval=0.5)
    assert m[("htap_cache_fetched_bytes_total", labels)] > 0
    assert m[("htap_cache_hits_total", labels)] >= 0 and m[("htap_cache_refetched_total", labels)] == 0
    assert m[("htap_cache_limit_bytes", labels)] == 1
    assert m[("htap_cache_bytes", labels)] >= 0  # the folder's size at the scrape (files come and go)
    ws.stop_service()
