"""Issue 15: the warehouse in an S3-compatible object store (moto's server, tests/services.py),
its local cache, and object-store faults.

The Warehouse behaviour suite runs on both implementations (a local folder, an S3 bucket); the
rest runs the service and Spark against a bucket, with Spark on a config of its own whose cache
is not the service's, so its reads go through the object store."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import normalized, wait_until
from services import SERVICES, pg_dsn
from workspace import Workspace, live_delta_files

from htap.conf import ObjectStoreConfig, load_config
from htap.errors import DamagedReplicaError, WarehouseAccessError, WarehouseUnavailableError
from htap.replica.warehouse import LocalWarehouse, ObjectStoreWarehouse, Retry, checksum_of


def s3_options(cache: Path, **changes) -> ObjectStoreConfig:
    s3 = SERVICES.s3
    settings = dict(endpoint=s3.endpoint, access_key_id=s3.access_key_id, secret_access_key=s3.secret_access_key,
                    cache_dir=cache, timeout_s=5.0, retries=3)
    return ObjectStoreConfig(**{**settings, **changes})


def new_bucket() -> str:
    return f"htap-{uuid.uuid4().hex[:12]}"


def s3_warehouse(tmp_path: Path, **changes) -> ObjectStoreWarehouse:
    w = ObjectStoreWarehouse(f"s3://{new_bucket()}/replica", s3_options(tmp_path / "cache", **changes))
    w.create()
    return w


def put(w, rel: str, data: bytes) -> str:
    staged = w.staging_path(rel)
    staged.write_bytes(data)
    return w.put(rel, staged)


# --- one behaviour suite, every implementation ------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def warehouse(request, tmp_path):
    if request.param == "local":
        return LocalWarehouse(tmp_path / "wh")
    return s3_warehouse(tmp_path)


def test_every_warehouse_stores_lists_fetches_and_deletes(warehouse, tmp_path):
    w = warehouse
    w.create()
    digest = put(w, "src/t-1/p0000/a.parquet", b"delta a")
    put(w, "src/t-1/p0000/a.parquet.dv", b"sidecar")
    put(w, "src/t-2/p0000/b.parquet", b"delta b")
    assert digest == checksum_of_bytes(b"delta a")
    assert w.list() == ["src/t-1/p0000/a.parquet", "src/t-1/p0000/a.parquet.dv", "src/t-2/p0000/b.parquet"]
    assert w.list("src/t-2") == ["src/t-2/p0000/b.parquet"]
    assert w.exists("src/t-1/p0000/a.parquet") and not w.exists("src/t-1/p0000/none.parquet")
    with w.local({"src/t-1/p0000/a.parquet": digest, "src/t-1/p0000/gone.parquet": None}) as root:
        assert (root / "src/t-1/p0000/a.parquet").read_bytes() == b"delta a"
        assert not (root / "src/t-1/p0000/gone.parquet").exists()  # missing stays missing
    w.put_bytes("manifests/m.json", b"{}")
    w.put_bytes("manifests/m.json", b"{\"v\": 2}")  # replaced
    assert w.get_bytes("manifests/m.json") == b"{\"v\": 2}" and w.get_bytes("manifests/none") is None
    w.delete("src/t-1/p0000/a.parquet")
    w.delete("src/t-1/p0000/a.parquet")  # already gone: fine
    w.delete_tree("src/t-2")
    assert w.list("src") == ["src/t-1/p0000/a.parquet.dv"]


def checksum_of_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# --- the cache ----------------------------------------------------------------------------------


def test_the_cache_keeps_what_was_written_and_evicts_the_least_recently_used(tmp_path):
    w = s3_warehouse(tmp_path, cache_bytes=2500)
    digests = {f"t/p0000/{i}.parquet": put(w, f"t/p0000/{i}.parquet", bytes([i]) * 1000) for i in range(3)}
    # The writer's cache holds what it uploaded, within its limit: the oldest went first.
    assert not w.cache.path("t/p0000/0.parquet").exists()
    assert w.cache.path("t/p0000/1.parquet").exists() and w.cache.path("t/p0000/2.parquet").exists()
    with w.local({"t/p0000/1.parquet": digests["t/p0000/1.parquet"]}):
        pass  # 1 is now more recent than 2
    misses = w.cache.misses
    with w.local({"t/p0000/0.parquet": digests["t/p0000/0.parquet"]}) as root:
        assert (root / "t/p0000/0.parquet").read_bytes() == bytes([0]) * 1000  # fetched again
    assert w.cache.misses == misses + 1
    assert w.cache.size() <= 2500
    assert not w.cache.path("t/p0000/2.parquet").exists()  # the least recently used
    assert w.cache.path("t/p0000/1.parquet").exists()
    # A read's files outlive an eviction that happens while it reads (hard links).
    with w.local({"t/p0000/1.parquet": digests["t/p0000/1.parquet"]}) as root:
        w.cache.path("t/p0000/1.parquet").unlink()
        assert (root / "t/p0000/1.parquet").read_bytes() == bytes([1]) * 1000


def test_a_corrupt_cached_copy_is_fetched_again_never_trusted(tmp_path):
    w = s3_warehouse(tmp_path)
    table = pa.table({"k": list(range(1000))})
    staged = w.staging_path("t/p0000/d.parquet")
    pq.write_table(table, staged)
    digest = w.put("t/p0000/d.parquet", staged)
    cached = w.cache.path("t/p0000/d.parquet")
    raw = bytearray(cached.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    cached.write_bytes(bytes(raw))
    with w.local({"t/p0000/d.parquet": digest}) as root:
        assert pq.read_table(root / "t/p0000/d.parquet").equals(table)
    assert w.cache.refetched == 1
    assert checksum_of(cached) == digest
    # A second process (no memory of what it verified) checks the copy too.
    other = ObjectStoreWarehouse(w.location, w.opts)
    cached.write_bytes(b"not parquet at all")
    with other.local({"t/p0000/d.parquet": digest}) as root:
        assert pq.read_table(root / "t/p0000/d.parquet").equals(table)
    assert other.cache.refetched == 1


def test_an_object_that_does_not_match_its_checksum_is_damage(tmp_path):
    w = s3_warehouse(tmp_path)
    digest = put(w, "t/p0000/d.parquet", b"the bytes the metadata knows")
    w.put_bytes("t/p0000/d.parquet", b"other bytes in the bucket")  # replaced behind our back
    w.cache.path("t/p0000/d.parquet").unlink()
    with pytest.raises(DamagedReplicaError, match="does not match the checksum"):
        with w.local({"t/p0000/d.parquet": digest}):
            pass


# --- faults -------------------------------------------------------------------------------------


def test_an_unreachable_store_is_retried_with_backoff_then_reported(tmp_path):
    waits: list[float] = []
    opts = s3_options(tmp_path / "cache", endpoint=f"http://127.0.0.1:{closed_port()}", timeout_s=1.0)
    w = ObjectStoreWarehouse("s3://bucket/replica", opts, retry=Retry(attempts=4, first_s=0.5, sleep=waits.append))
    staged = w.staging_path("a")
    staged.write_bytes(b"x")
    with pytest.raises(WarehouseUnavailableError, match="failed 4 times.*replica.s3_endpoint"):
        w.put("a", staged)
    assert waits == [0.5, 1.0, 2.0]


def test_a_refused_request_names_the_setting_to_fix(tmp_path):
    opts = s3_options(tmp_path / "cache")
    w = ObjectStoreWarehouse(f"s3://{new_bucket()}/replica", opts)  # never created
    staged = w.staging_path("a")
    staged.write_bytes(b"x")
    with pytest.raises(WarehouseAccessError, match="bucket does not exist"):
        w.put("a", staged)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


class Switch:
    """A TCP relay in front of the S3 server that can be cut: while down it refuses new
    connections and drops open ones, as an unreachable store does."""

    def __init__(self, upstream: str):
        host, port = upstream.split("://", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up = True
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def down(self) -> None:
        self.up = False
        for s in self.open:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.open = []

    def close(self) -> None:
        self.down()
        self.listener.close()


# --- the service and Spark on an S3 warehouse ---------------------------------------------------


def s3_settings(endpoint: str, cache: str) -> dict[str, object]:
    s3 = SERVICES.s3
    return {"s3_endpoint": endpoint, "s3_access_key_id": s3.access_key_id,
            "s3_secret_access_key": s3.secret_access_key, "s3_retries": 2, "s3_timeout_s": 3.0, "cache_dir": cache}


def set_replica_keys(config: Path, settings: dict[str, object], out: Path | None = None) -> Path:
    """Set keys of the config's [replica] section (written by `htap init`)."""
    lines = config.read_text().splitlines()
    for key, value in settings.items():
        text = f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value!r}"
        lines = [ln for ln in lines if not ln.lstrip("# ").startswith(f"{key} =")]
        lines.insert(lines.index("[replica]") + 1, text)
    target = out or config
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.fixture
def s3_workspace(tmp_path, pg, monkeypatch):
    """A Postgres workspace whose warehouse is a fresh bucket. `htap init` reaches the store
    through the standard AWS environment variables; the config then names it itself."""
    s3 = SERVICES.s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_access_key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    ws = Workspace(tmp_path, pg, pg_dsn(), warehouse=f"s3://{new_bucket()}/replica")
    set_replica_keys(ws.config, s3_settings(s3.endpoint, "service-cache"))
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    yield ws
    ws.close()


@pytest.fixture
def s3_catalog(spark, s3_workspace):
    """A Spark catalog over the workspace, through a config of its own: same bucket and
    metadata store, another cache (Spark's reads fetch from the object store)."""
    ws = s3_workspace
    config = set_replica_keys(ws.config, {"cache_dir": "spark-cache", "metadata": str(load_config(ws.config).metadata)},
                              out=ws.root / "spark.toml")
    name = f"c_{ws.source}"
    spark.conf.set(f"spark.sql.catalog.{name}", "io.sparkhtap.HtapCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.config", str(config))
    return name


def test_ingest_to_s3_and_spark_reads_equal_postgres(s3_workspace, spark, s3_catalog):
    ws = s3_workspace
    t = f"{ws.schema}.orders"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, region text, amount numeric(10,2))")
    ws.sql(f"INSERT INTO {t} SELECT g, 'r' || (g % 3), g * 1.5 FROM generate_series(1, 2000) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("orders")
    ws.sql(f"UPDATE {t} SET amount = amount + 1 WHERE id % 7 = 0")
    ws.sql(f"DELETE FROM {t} WHERE id % 11 = 0")
    ws.sql(f"INSERT INTO {t} VALUES (5000, 'new', 1.25)")
    ws.wait_caught_up("orders")

    cfg = load_config(ws.config)
    assert str(cfg.warehouse).startswith("s3://") and not (ws.root / "warehouse").exists()
    with live_delta_files(cfg, ws.table("orders").id) as deltas:  # listed first, kept while the objects are listed
        objects = ObjectStoreWarehouse(str(cfg.warehouse), cfg.object_store).list()
    assert deltas and {d.path for d in deltas} <= set(objects)
    assert all(d.checksum for d in deltas)

    for query in (f"SELECT * FROM {{t}}", f"SELECT region, count(*), sum(amount) FROM {{t}} GROUP BY region"):
        got = normalized(spark.sql(query.format(t=f"{s3_catalog}.{t}")).collect())
        assert got == normalized(ws.sql(query.format(t=t)))
    spark_cache = list((ws.root / "spark-cache").rglob("*.parquet"))
    assert spark_cache, "Spark's reads fetched the deltas into their own cache"

    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def slot_confirmed(ws) -> int:
    from htap.seq import lsn_to_int

    [(lsn,)] = ws.sql("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (f"htap_{ws.source}",))
    return lsn_to_int(lsn)


def test_an_unreachable_store_confirms_nothing_and_loses_nothing(s3_workspace):
    ws = s3_workspace
    switch = Switch(SERVICES.s3.endpoint)
    try:
        set_replica_keys(ws.config, {"s3_endpoint": switch.endpoint})
        t = f"{ws.schema}.items"
        ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 100) g")
        ws.htap("tables", "add", t)
        ws.start_service()
        ws.wait_readable("items")
        ws.wait_caught_up("items")
        durable = ws.table("items").max_safe_seq

        switch.down()
        ws.sql(f"INSERT INTO {t} SELECT g, 'late' || g FROM generate_series(101, 300) g")
        ws.sql(f"UPDATE {t} SET v = 'changed' WHERE id <= 50")
        after = ws.source_seq()
        wait_until(lambda: "not stored, nothing confirmed" in ws.log(), None, "a checkpoint to fail on the store")
        assert ws.table("items").max_safe_seq == durable  # nothing became visible
        assert slot_confirmed(ws) <= durable + 1  # nor was it confirmed to the source
        assert "object store unreachable" in ws.log()

        switch.up = True
        ws.wait_seq("items", after)
        wait_until(lambda: slot_confirmed(ws) > durable + 1, None, "the source to be told the new position")
        r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        ws.stop_service()
        switch.close()


def test_env_credentials_alone_reach_the_store(tmp_path, monkeypatch):
    s3 = SERVICES.s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_access_key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    w = ObjectStoreWarehouse(f"s3://{new_bucket()}/x", ObjectStoreConfig(cache_dir=tmp_path))
    w.create()
    w.put_bytes("a", b"1")
    assert w.get_bytes("a") == b"1"


def test_a_task_opens_the_bucket_from_the_settings_it_carries_into_its_nodes_cache(tmp_path, monkeypatch):
    """Executors read no config file: a task carries the warehouse's location and settings, and
    HTAP_CACHE_DIR on the executor (not the driver's cache folder) says where its copies go."""
    import pickle

    from htap.conf import CACHE_DIR_ENV
    from htap.replica.warehouse import open_warehouse_at

    writer = s3_warehouse(tmp_path / "service")
    checksum = put(writer, "t/p0/d1.parquet", b"delta bytes")
    carried = pickle.loads(pickle.dumps(writer.opts))  # as a Spark task ships it
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "node-cache"))
    reader = open_warehouse_at(writer.location, carried)
    assert reader is not writer and reader.cache.root.is_relative_to(tmp_path / "node-cache")
    with reader.local({"t/p0/d1.parquet": checksum}) as folder:
        assert (folder / "t/p0/d1.parquet").read_bytes() == b"delta bytes"
    assert list((tmp_path / "node-cache").rglob("*.parquet"))
    assert open_warehouse_at(str(tmp_path / "wh"), carried).location == str(tmp_path / "wh")  # a local folder


# --- recovery from the bucket alone -----------------------------------------------------------


def test_recover_rebuilds_the_metadata_store_from_the_bucket_and_streaming_continues(s3_workspace):
    import json
    import shutil
    import signal

    from htap.replica.manifest import manifest_path

    ws = s3_workspace
    t = f"{ws.schema}.accounts"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, owner text, balance bigint)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'o' || g, g * 10 FROM generate_series(1, 3000) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("accounts")
    for i in range(3):  # several checkpoints: deltas with deletion vectors
        last_change = ws.source_seq()  # before the last changes
        ws.sql(f"UPDATE {t} SET balance = balance + 1 WHERE id % {i + 2} = 0")
        ws.sql(f"DELETE FROM {t} WHERE id % 97 = {i}")
        ws.wait_caught_up("accounts")
    cfg = load_config(ws.config)
    warehouse = ObjectStoreWarehouse(str(cfg.warehouse), cfg.object_store)

    def manifest_position() -> int:
        return json.loads(warehouse.get_bytes(manifest_path(ws.source)))["sources"][0]["position"]

    # Commits to a table the replica does not hold: idle checkpoints, which skip the manifest but
    # tell the source a newer position than the manifest's. Recovery must cope with that.
    ws.sql(f"CREATE TABLE {ws.schema}.not_replicated (id int)")
    ws.wait_caught_up("accounts")

    def confirmed_past_the_manifest() -> bool:
        ws.sql(f"INSERT INTO {ws.schema}.not_replicated VALUES (1)")
        return slot_confirmed(ws) - 1 > manifest_position()

    wait_until(confirmed_past_the_manifest, None, "an idle checkpoint to confirm past the manifest", interval=1.0)
    before = ws.table("accounts")
    ws.stop_service(signal.SIGKILL)

    manifest = json.loads(warehouse.get_bytes(manifest_path(ws.source)))
    # The manifest covers every change (written before the source was told of it); the source may
    # have been told a newer position since, but only past idle checkpoints, which skip the write.
    assert manifest["sources"][0]["position"] > last_change

    # The metadata store and the service's cache are lost; the source goes on meanwhile.
    metadata = Path(cfg.metadata)
    for p in metadata.parent.glob(metadata.name + "*"):
        p.unlink()
    shutil.rmtree(ws.root / "service-cache")
    ws.sql(f"INSERT INTO {t} VALUES (100000, 'while down', 1)")
    ws.sql(f"UPDATE {t} SET owner = 'changed while down' WHERE id <= 10")

    r = ws.htap("recover")
    assert "1 table(s)" in r.stdout and r.returncode == 0
    after = ws.table("accounts")
    # The manifest's state: behind the lost store by idle checkpoints only (or by one checkpoint
    # when killed between its metadata commit and its manifest), never behind a change (above).
    assert after.max_safe_seq == manifest["sources"][0]["position"]
    assert (after.id, after.partition_bounds_b64, after.state) == (before.id, before.partition_bounds_b64, before.state)
    again = ws.htap("recover", check=False)
    assert again.returncode == 2 and "already has source" in again.stderr

    ws.start_service()
    ws.sql(f"INSERT INTO {t} VALUES (100001, 'after recovery', 2)")
    ws.wait_caught_up("accounts")
    assert ws.table("accounts").max_safe_seq > before.max_safe_seq
    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 0, r.stdout + r.stderr


# --- Spark on a cluster: executors reach the data only through S3 -------------------------------


@pytest.mark.slow
def test_a_local_cluster_reads_the_s3_warehouse_like_postgres(s3_workspace):
    """Spark `local-cluster[2,1,1024]`: executors are JVMs of their own with Python workers of
    their own, reading the replica from the bucket into a cache of their own."""
    import json
    import subprocess
    import sys

    ws = s3_workspace
    t = f"{ws.schema}.events"
    ws.sql(f"CREATE TABLE {t} (id bigint PRIMARY KEY, kind text, n int)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'k' || (g % 5), g % 1000 FROM generate_series(1, 20000) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("events")
    ws.sql(f"UPDATE {t} SET n = n + 1 WHERE id % 3 = 0")
    ws.sql(f"DELETE FROM {t} WHERE id % 10 = 0")
    ws.wait_caught_up("events")
    config = set_replica_keys(ws.config, {"cache_dir": "cluster-cache"}, out=ws.root / "cluster.toml")
    queries = {
        "SELECT kind, count(*), sum(n), min(id), max(id) FROM {t} GROUP BY kind": None,
        "SELECT id, kind, n FROM {t} WHERE id BETWEEN 100 AND 300": None,
    }
    catalog = "cluster"
    # The executors' cache is a folder of their own (HTAP_CACHE_DIR set on them only): they open
    # the bucket from the warehouse settings each task carries, not from the driver's config file.
    executor_cache = ws.root / "executor-cache"
    r = subprocess.run([sys.executable, str(Path(__file__).parent / "cluster_query.py"), str(config), catalog,
                        *[q.format(t=f"{catalog}.{t}") for q in queries]],
                       capture_output=True, text=True, cwd=ws.root, timeout=1200,
                       env={**os.environ, "HTAP_TEST_EXECUTOR_CACHE": str(executor_cache)})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["executors"] == 2
    for q, result in zip(queries, lines[1:]):
        assert normalized(tuple(row) for row in result["rows"]) == normalized(ws.sql(q.format(t=t)))
    assert list(executor_cache.rglob("*.parquet")), "the executors fetched the deltas from the bucket"
    assert not (ws.root / "warehouse").exists()


def test_kill_9_while_uploading_loses_and_duplicates_nothing(s3_workspace):
    """The service is killed at arbitrary moments while it uploads checkpoints (writes go on);
    each restart resumes from its durable position, and the replica equals the source."""
    import random
    import signal
    import time

    ws = s3_workspace
    t = f"{ws.schema}.ledger"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, amount bigint, note text)")
    ws.sql(f"INSERT INTO {t} SELECT g, g, repeat('x', 200) FROM generate_series(1, 5000) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("ledger")
    stop = threading.Event()

    def write() -> None:
        import psycopg2

        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = True
        rng = random.Random(15)
        with conn.cursor() as cur:
            while not stop.is_set():
                lo = rng.randrange(1, 5000)
                cur.execute(f"UPDATE {t} SET amount = amount + 1, note = repeat(md5(random()::text), 8)"
                            f" WHERE id BETWEEN %s AND %s", (lo, lo + 300))
                cur.execute(f"INSERT INTO {t} VALUES (%s, 0, 'new') ON CONFLICT (id) DO NOTHING", (rng.randrange(5001, 20000),))
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        rng = random.Random(9)
        for _ in range(3):
            uploads = ws.log().count("checkpoint at seq")
            wait_until(lambda: ws.log().count("checkpoint at seq") > uploads, None, "a checkpoint with changes")
            time.sleep(rng.uniform(0.0, 0.6))  # somewhere in the next checkpoint's upload, or not
            ws.stop_service(signal.SIGKILL)
            ws.start_service()
    finally:
        stop.set()
        writer.join()
    ws.wait_caught_up("ledger")
    r = ws.htap("verify", "data", "--out", str(ws.root / "verify"), check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_what_a_crashed_process_left_in_the_cache_is_swept(tmp_path):
    import time

    w = s3_warehouse(tmp_path)
    old = time.time() - 2 * 24 * 3600
    staged, fresh = w.cache.staging(), w.cache.staging()
    staged.write_bytes(b"half an upload")
    fresh.write_bytes(b"an upload in progress")
    reads = w.cache.root / "reads" / "dead"
    (reads / "t").mkdir(parents=True)
    (reads / "t" / "d.parquet").write_bytes(b"x")
    for p in (staged, reads):
        os.utime(p, (old, old))
    ObjectStoreWarehouse(w.location, w.opts)  # a new process starts
    assert not staged.exists() and not reads.exists()
    assert fresh.exists()


def test_while_the_store_is_unreachable_scans_fail_over_to_the_source_and_say_why(s3_workspace, spark):
    ws = s3_workspace
    switch = Switch(SERVICES.s3.endpoint)
    try:
        config = set_replica_keys(ws.config, {"s3_endpoint": switch.endpoint, "cache_dir": "spark-cache"},
                                  out=ws.root / "spark.toml")
        catalog = f"c_{ws.source}"
        spark.conf.set(f"spark.sql.catalog.{catalog}", "io.sparkhtap.HtapCatalog")
        spark.conf.set(f"spark.sql.catalog.{catalog}.config", str(config))
        t = f"{ws.schema}.items"
        ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 500) g")
        ws.htap("tables", "add", t)
        ws.start_service()
        ws.wait_readable("items")
        ws.wait_caught_up("items")
        query = f"SELECT * FROM {catalog}.{t}"
        want = normalized(ws.sql(f"SELECT * FROM {t}"))

        def last_scan():
            with ws.store() as store:
                return store.recent_scans(ws.table("items").id, 1)[0]

        assert normalized(spark.sql(query).collect()) == want and last_scan().route == "replica"
        switch.down()

        def failed_over():
            try:
                got = normalized(spark.sql(query).collect())
            except Exception as e:  # planned before the probe noticed (its answer lives 5 s): fails naming the store
                assert "object store unreachable" in str(e)
                return None
            return last_scan().route == "source" and got

        assert wait_until(failed_over, None, "a scan to fail over to the source") == want
        assert "object store of warehouse" in last_scan().reason and "unreachable" in last_scan().reason
        switch.up = True
        wait_until(lambda: spark.sql(query).collect() and last_scan().route == "replica", None, "the replica again")
    finally:
        ws.stop_service()
        switch.close()
