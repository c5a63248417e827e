"""Issue 29 (change feed): a table's changes between two seqs, read from the replica.

A Postgres table takes random transactions (inserts, updates that leave a TOASTed column
unchanged, deletes, primary key changes, truncations) while the service checkpoints, compacts and
repartitions it. For pairs of seqs a < b the replica reached, the changes in (a, b] applied in
order to the replica's rows at a give exactly its rows at b, every preimage and delete carries
the row as it was, and the changes of (a, m] then (m, b] are those of (a, b].
"""

from __future__ import annotations

import json
import random
import signal
import uuid

import pyarrow as pa
import pytest

from conftest import normalize, tune
from workspace import wait_until


def replica_state(cfg, store, table, seq: int) -> dict:
    """The replica's rows of `table` at `seq`, by key."""
    from htap.pushdown.replica_reader import read_plan
    from htap.replica.read_plans import pin_and_plan
    from htap.rewrite.pushed import table_plan

    batches = []
    for plan in pin_and_plan(store, table, seq, cfg.window_s, pin_ttl_s=60.0):
        batches += read_plan(cfg.warehouse, table.qualified_name, table.arrow_schema, list(table.key), plan,
                             table_plan(table.qualified_name, table.arrow_schema.names), table.arrow_schema)
    rows = pa.Table.from_batches(batches, schema=table.arrow_schema).to_pylist()
    return {r["id"]: tuple(normalize(v) for v in r.values()) for r in rows}


def apply(state: dict, changes: pa.Table, names: list[str]) -> dict:
    """`state` after `changes`, checking that each preimage and delete is the row as it was."""
    state = dict(state)
    rows = changes.to_pylist()
    seqs = [r["_commit_seq"] for r in rows]
    assert seqs == sorted(seqs), "changes out of seq order"
    for i, r in enumerate(rows):
        row = tuple(normalize(r[n]) for n in names)
        key, kind = r["id"], r["_change_type"]
        if kind in ("delete", "update_preimage"):
            assert state.get(key) == row, f"{kind} of key {key} at seq {r['_commit_seq']} is not the row as it was"
        if kind == "update_preimage":
            post = rows[i + 1]
            assert (post["_change_type"], post["id"], post["_commit_seq"]) == ("update_postimage", key, r["_commit_seq"])
        if kind == "truncate":  # a feed reset to the table's copy: its rows follow as inserts
            state.clear()
        elif kind == "delete":
            del state[key]
        elif kind == "insert":
            assert key not in state, f"insert of key {key} at seq {r['_commit_seq']}, which was live"
            state[key] = row
        elif kind == "update_postimage":
            state[key] = row
    return state


CHANGE_ORDER = {"truncate": -1, "delete": 0, "update_preimage": 1, "update_postimage": 2, "insert": 3}  # at one seq


def rebuild(spark, sink) -> dict:
    """A Parquet sink's change rows (as Spark's file sink committed them, in any order) applied
    in seq order to an empty table."""
    rows = sorted((r.asDict() for r in spark.read.parquet(str(sink)).collect()),
                  key=lambda r: (r["_commit_seq"], CHANGE_ORDER[r["_change_type"]] >= 0, r["id"] or 0,
                                 CHANGE_ORDER[r["_change_type"]]))
    return apply({}, pa.Table.from_pylist(rows), ["id", "v", "n", "big"])


def random_transaction(ws, rng: random.Random, t: str, live: set[int], next_id: list[int], mysql: bool = False) -> None:
    """Inserts, updates that leave `big` alone (unchanged TOAST on Postgres), deletes, key
    changes, and now and then a TRUNCATE (MySQL: a DELETE of every row, TRUNCATE being DDL)."""
    big = "REPEAT(MD5(RAND()), 80)" if mysql else "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 80))"
    ws.sql("BEGIN")
    if rng.random() < 0.03 and live:
        ws.sql(f"DELETE FROM {t}" if mysql else f"TRUNCATE {t}")
        live.clear()
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.35 or not live:
            k = next_id[0]
            next_id[0] += 1
            ws.sql(f"INSERT INTO {t} VALUES (%s, %s, %s, {big})", (k, f"v{k}", rng.randint(-999, 999) / 100))
            live.add(k)
        elif r < 0.75:
            ws.sql(f"UPDATE {t} SET v = %s, n = %s WHERE id = %s",
                   (f"u{rng.randint(0, 99)}", rng.randint(-999, 999) / 100, rng.choice(sorted(live))))
        elif r < 0.9:
            k = rng.choice(sorted(live))
            ws.sql(f"DELETE FROM {t} WHERE id = %s", (k,))
            live.discard(k)
        else:  # a key change
            k, new = rng.choice(sorted(live)), next_id[0]
            next_id[0] += 1
            ws.sql(f"UPDATE {t} SET id = %s WHERE id = %s", (new, k))
            live.discard(k)
            live.add(new)
    ws.sql("COMMIT")


class FeedTable:
    """A source table under random transactions (random_transaction), replicated by `htap serve`."""

    def __init__(self, ws, seed: int, transactions: int, mysql: bool = False, **settings):
        tune(ws, flush_interval_s=0.05, **settings)
        self.ws, self.mysql, self.rng = ws, mysql, random.Random(seed)
        self.name = f"feed_{uuid.uuid4().hex[:8]}"
        self.t = f"{ws.schema}.{self.name}"
        self.live: set[int] = set()
        self.next_id = [1]
        ws.sql(f"CREATE TABLE {self.t} (id int PRIMARY KEY, v text, n numeric(10, 2), big text)")
        self.write(transactions)
        ws.htap("tables", "add", f"{ws.schema}.{self.name}")
        ws.start_service()
        ws.wait_readable(self.name)
        ws.wait_caught_up(self.name)

    def write(self, transactions: int) -> None:
        for _ in range(transactions):
            random_transaction(self.ws, self.rng, self.t, self.live, self.next_id, self.mysql)

    def source_rows(self) -> dict:
        return {r[0]: tuple(normalize(v) for v in r) for r in self.ws.sql(f"SELECT id, v, n, big FROM {self.t}")}


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.pg), pytest.param("mariadb", marks=pytest.mark.mysql)])
def feed_workspace(request):
    """A Postgres or a MariaDB workspace, and whether it is MariaDB."""
    if request.param == "postgres":
        return request.getfixturevalue("workspace"), False
    return request.getfixturevalue("my_workspace"), True


def test_changes_between_any_two_seqs_replay_the_replica_exactly(feed_workspace):
    from htap.conf import load_config
    from htap.replica.changes import read_changes
    from htap.replica.metadata import MetadataStore
    from htap.replica.read_plans import OutsideWindow
    from htap.replica.warehouse import open_warehouse

    ws, mysql = feed_workspace
    feed = FeedTable(ws, 29, 5, mysql, compaction_interval_s=0.2, partition_rows=60)  # checkpoints, merges, splits
    name, t, live, next_id = feed.name, feed.t, feed.live, feed.next_id
    seqs = [ws.table(name).max_safe_seq]

    def layouts() -> int:
        with ws.store() as store:
            return len(store.layouts(ws.table(name).id))

    for round in range(12):
        feed.write(feed.rng.randint(1, 6))
        if round == 5:  # a bulk insert: the partition splits (ranges after this span a repartition)
            before = layouts()
            rows = f"seq_{next_id[0]}_to_{next_id[0] + 149}" if mysql else f"generate_series({next_id[0]}, {next_id[0] + 149}) AS g(seq)"
            ws.sql(f"INSERT INTO {t} SELECT seq, 'bulk', seq / 100.0, NULL FROM {rows}")
            live.update(range(next_id[0], next_id[0] + 150))
            next_id[0] += 150
            wait_until(lambda: layouts() > before, None, "the table to be repartitioned")
        ws.wait_caught_up(name)
        seqs.append(ws.table(name).max_safe_seq)

    cfg = load_config(ws.config)
    warehouse = open_warehouse(cfg)
    with MetadataStore(cfg.metadata) as store:
        table = store.get_table(ws.source, ws.schema, name)
        names = table.arrow_schema.names
        states = {s: replica_state(cfg, store, table, s) for s in seqs}
        assert sorted(states[seqs[-1]]) == sorted(live)

        def changes(a, b):
            return read_changes(store, warehouse, table, a, b, cfg.window_s, 60.0)

        kinds = set()
        for a, b in [*zip(seqs, seqs[1:]), (seqs[0], seqs[-1]), (seqs[2], seqs[9])]:
            got = changes(a, b)
            kinds |= set(got.column("_change_type").to_pylist())
            assert apply(states[a], got, names) == states[b], f"changes in ({a}, {b}]"
            assert all(a < s <= b for s in got.column("_commit_seq").to_pylist())
            assert got.column("_commit_timestamp").null_count == 0
        assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}
        whole, m = changes(seqs[0], seqs[-1]), seqs[len(seqs) // 2]
        assert pa.concat_tables([changes(seqs[0], m), changes(m, seqs[-1])]).equals(whole)
        assert changes(seqs[3], seqs[3]).num_rows == 0

        with pytest.raises(OutsideWindow, match="no longer kept.*window_s"):
            changes(table.copy_seq - 1, seqs[-1])
        with pytest.raises(OutsideWindow, match="has reached seq"):
            changes(seqs[0], table.max_safe_seq + 1_000_000)


@pytest.mark.pg
@pytest.mark.spark
def test_change_feed_in_spark_batch_and_a_restarted_stream_rebuild_the_table(workspace, spark, catalog, tmp_path):
    """`readChangeFeed` on the `htap` data source: a batch read equals read_changes; a stream
    from a snapshot, run until caught up, then restarted from its checkpoint after more writes,
    gives rows that applied in order to an empty table rebuild the source table exactly (nothing
    lost, nothing twice)."""
    from htap.conf import load_config
    from htap.replica.changes import read_changes
    from htap.replica.metadata import MetadataStore
    from htap.replica.warehouse import open_warehouse

    ws = workspace
    feed = FeedTable(ws, 290, 6)
    name = feed.name
    first = ws.table(name).max_safe_seq
    feed.write(8)
    ws.wait_caught_up(name)
    second = ws.table(name).max_safe_seq

    options = {"config": str(ws.config), "table": f"{ws.schema}.{name}", "readChangeFeed": "true"}
    batch = spark.read.format("htap").options(**options, startingVersion=str(first), endingVersion=str(second)).load()
    assert batch.columns[-3:] == ["_change_type", "_commit_seq", "_commit_timestamp"]
    cfg = load_config(ws.config)
    with MetadataStore(cfg.metadata) as store:
        table = store.get_table(ws.source, ws.schema, name)
        expected = read_changes(store, open_warehouse(cfg), table, first, second, cfg.window_s, 60.0)
    names = table.arrow_schema.names

    def rows(records):
        return sorted((r["_commit_seq"], r["_change_type"], tuple(normalize(r[n]) for n in names)) for r in records)

    assert rows(r.asDict() for r in batch.collect()) == rows(expected.to_pylist())
    # The same through the catalog: <catalog>.changes.<schema>.<table>, in SQL and as a stream.
    feed_table = f"{catalog}.changes.{ws.schema}.{name}"
    sql = spark.sql(f"SELECT * FROM {feed_table} WITH ('startingVersion' = '{first}', 'endingVersion' = '{second}')")
    assert rows(r.asDict() for r in sql.collect()) == rows(expected.to_pylist())
    via_catalog = []
    (spark.readStream.option("startingVersion", str(first)).table(feed_table)
     .writeStream.foreachBatch(lambda df, _i: via_catalog.extend(r.asDict() for r in df.collect()))
     .option("checkpointLocation", str(tmp_path / "via-catalog")).trigger(availableNow=True).start().awaitTermination())
    assert rows(r for r in via_catalog if r["_commit_seq"] <= second) == rows(expected.to_pylist())

    # Admission control: micro-batches of at most 3 row versions (or one transaction), the same rows.
    batches = []
    (spark.readStream.format("htap").options(**options, startingVersion=str(first), maxChangesPerTrigger="3").load()
     .writeStream.foreachBatch(lambda df, _i: batches.append([r.asDict() for r in df.collect()]))
     .option("checkpointLocation", str(tmp_path / "limited")).trigger(availableNow=True).start().awaitTermination())
    assert len([b for b in batches if b]) > 1
    for b in batches:
        versions = [r for r in b if r["_change_type"] != "update_preimage"]
        assert len(versions) <= 3 or len({r["_commit_seq"] for r in b}) == 1, "a micro-batch over its limit"
    limited = [r for b in batches for r in b if r["_commit_seq"] <= second]
    assert rows(limited) == rows(expected.to_pylist())

    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run_stream() -> None:
        query = (spark.readStream.format("htap").options(**options, startingVersion="snapshot").load()
                 .writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run_stream()
    # Running on, from its checkpoint, while the source takes writes and `htap serve` is killed.
    query = (spark.readStream.format("htap").options(**options, startingVersion="snapshot").load()
             .writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="0.2 seconds").start())
    feed.write(4)
    ws.stop_service(signal.SIGKILL)
    feed.write(4)
    ws.start_service()
    ws.wait_caught_up(name)
    last = ws.table(name).max_safe_seq

    def streamed_to() -> int:
        progress = query.lastProgress
        return json.loads(progress["sources"][0]["endOffset"])["seq"] if progress and progress["sources"] else -1

    wait_until(lambda: streamed_to() >= last, None, f"the stream to reach seq {last}")
    query.stop()
    feed.write(4)
    ws.wait_caught_up(name)
    last = ws.table(name).max_safe_seq
    run_stream()  # from its checkpoint again: the changes after what the running query read
    assert spark.read.parquet(str(sink)).agg({"_commit_seq": "max"}).collect()[0][0] <= last
    assert rebuild(spark, sink) == feed.source_rows()
    assert sorted(feed.source_rows()) == sorted(feed.live)


@pytest.mark.pg
@pytest.mark.spark
def test_a_named_feed_keeps_its_changes_past_the_window(workspace, spark, tmp_path):
    """With a 1 s queryable window, changes older than a second are folded by compaction and
    refused to an unnamed read; a stream named with feedName leases the start of what it reads
    next, so after its window passed it still reads every change exactly (and the metrics show
    the lease)."""
    from htap.app.metrics import HtapCollector
    from htap.conf import load_config
    from htap.ingest.health import ServiceState
    from htap.replica.metadata import MetadataStore
    from htap.replica.read_plans import queryable_window

    ws = workspace
    feed = FeedTable(ws, 2900, 4, compaction_interval_s=0.2, window_s=1.0)
    name = feed.name
    options = {"config": str(ws.config), "table": f"{ws.schema}.{name}", "readChangeFeed": "true"}
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run_stream() -> None:
        (spark.readStream.format("htap").options(**options, startingVersion="snapshot", feedName="etl").load()
         .writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start().awaitTermination())

    run_stream()
    start = ws.table(name).max_safe_seq  # what the stream read up to (it planned its last range there)
    feed.write(10)
    ws.wait_caught_up(name)
    cfg = load_config(ws.config)
    with MetadataStore(cfg.metadata) as store:
        wait_until(lambda: queryable_window(store, store.get_table(ws.source, ws.schema, name), cfg.window_s).min_seq > start,
                   None, "the queryable window to pass the stream's position")
        metrics = {m.name: m for m in HtapCollector(cfg, ServiceState()).collect()}
    held = [s.value for s in metrics["htap_table_change_feed_pins"].samples if s.labels["table"] == f"{ws.schema}.{name}"]
    assert held == [1.0]

    from htap.replica.read_plans import OutsideWindow

    with pytest.raises(Exception, match="no longer kept"):  # unnamed: refused, not wrong
        spark.read.format("htap").options(**options, startingVersion=str(start)).load().collect()
    with MetadataStore(cfg.metadata) as store:
        from htap.replica.changes import read_changes
        from htap.replica.warehouse import open_warehouse

        with pytest.raises(OutsideWindow):
            read_changes(store, open_warehouse(cfg), store.get_table(ws.source, ws.schema, name), start,
                         ws.table(name).max_safe_seq, cfg.window_s, 60.0)
    run_stream()  # named: from its checkpoint, below the window
    assert rebuild(spark, sink) == feed.source_rows()


@pytest.mark.pg
def test_a_streams_first_batch_is_one_snapshot_however_often_spark_asks_where_it_starts(workspace):
    """Spark asks a stream for its initial offset when it plans the first micro-batch, again when
    it runs it, and again after a restart before that batch committed. Driven that way (the
    reader as Spark calls it) with startingVersion=snapshot while the replica moves on between
    the asks, the first batch is the rows at one seq and the next batches the changes after it:
    applied in order they give the source table (a start read anew each time made the snapshot
    hold changes the next batch read again)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from htap.pushdown.change_feed import ChangeFeedStreamReader, read_partition

    ws = workspace
    feed = FeedTable(ws, 2903, 4)
    ws.wait_caught_up(feed.name)
    options = {"config": str(ws.config), "table": f"{ws.schema}.{feed.name}", "readChangeFeed": "true",
               "startingVersion": "snapshot"}
    reader = ChangeFeedStreamReader(options, None)
    limit = ReadMaxRows(8)
    first_end = reader.latestOffset(reader.initialOffset(), limit)
    feed.write(6)
    ws.wait_caught_up(feed.name)
    planned = [reader.partitions(reader.initialOffset(), first_end)]
    again = ChangeFeedStreamReader(options, None)  # a restarted query, its first batch not committed
    assert again.partitions(again.initialOffset(), json.loads(json.dumps(first_end))) == planned[0]
    start = first_end
    while (end := reader.latestOffset(start, limit)) != start:
        planned.append(reader.partitions(start, end))
        start = end
    assert len(planned) > 2
    batches = [b for partitions in planned for p in partitions for b in read_partition(p)]
    changes = pa.Table.from_batches(batches).drop_columns(["_commit_timestamp"])
    assert apply({}, changes, ["id", "v", "n", "big"]) == feed.source_rows()


STREAM = """
import sys
from htap.catalog.shim import spark_session

config, table, sink, checkpoint = sys.argv[1:5]
spark = spark_session("unused", config, **{"spark.sql.shuffle.partitions": "2"})
spark.sparkContext.setLogLevel("ERROR")
feed = dict(config=config, table=table, readChangeFeed="true", startingVersion="snapshot", maxChangesPerTrigger="8")
(spark.readStream.format("htap").options(**feed).load()
 .writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
 .trigger(processingTime="0.1 seconds").start().awaitTermination())
"""


@pytest.mark.pg
@pytest.mark.spark
def test_a_stream_killed_with_sigkill_resumes_exactly_once(workspace, spark, tmp_path):
    """The streaming query's own process killed -9 in the middle of its micro-batches (small
    ones: maxChangesPerTrigger), while the source takes writes: started again on its checkpoint,
    its Parquet sink (what Spark's file sink committed) applied in order rebuilds the source
    table — no change lost, none twice."""
    import subprocess
    import sys

    ws = workspace
    feed = FeedTable(ws, 2901, 4)
    name = feed.name
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    log = open(tmp_path / "stream.log", "ab")

    started: list[subprocess.Popen] = []

    def start():
        started.append(subprocess.Popen([sys.executable, "-c", STREAM, str(ws.config), f"{ws.schema}.{name}",
                                         str(sink), str(checkpoint)], stdout=log, stderr=log))
        return started[-1]

    def committed_batches() -> int:
        folder = sink / "_spark_metadata"
        return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0

    def rebuilt() -> dict:
        return rebuild(spark, sink) if committed_batches() else {}

    try:
        stream = start()

        def written_until_two_batches() -> bool:
            # a transaction per poll: when the stream's JVM comes up after the service has
            # replicated every write so far, its snapshot batch holds them all, and only later
            # writes make a second micro-batch
            if committed_batches() >= 2 or stream.poll() is not None:
                return True
            feed.write(1)
            return False

        wait_until(written_until_two_batches, None, "two micro-batches in the sink", interval=0.2)
        assert stream.poll() is None, (tmp_path / "stream.log").read_text()[-3000:]
        stream.send_signal(signal.SIGKILL)
        stream.wait()
        feed.write(6)
        source = feed.source_rows()
        stream = start()
        # (apply() also fails at once on a change applied twice or out of order)
        wait_until(lambda: stream.poll() is not None or rebuilt() == source, None,
                   "the restarted stream's sink to rebuild the source table", interval=0.5)
        assert stream.poll() is None, (tmp_path / "stream.log").read_text()[-3000:]
    finally:  # never leave a streaming process behind, whatever failed
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        log.close()
    assert rebuilt() == source


@pytest.mark.pg
@pytest.mark.spark
def test_a_stream_over_a_table_copied_again_resets_to_the_copy(workspace, spark, tmp_path):
    """`htap tables recopy` while a stream follows the table: the versions before the new copy are
    gone, so the stream's next micro-batch is a `truncate` marker and the copy's rows as inserts,
    then the changes after it; applied in order, the sink still rebuilds the source table."""
    ws = workspace
    feed = FeedTable(ws, 2902, 4)
    options = {"config": str(ws.config), "table": f"{ws.schema}.{feed.name}", "readChangeFeed": "true"}
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run_stream() -> None:
        (spark.readStream.format("htap").options(**options, startingVersion="snapshot").load()
         .writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start().awaitTermination())

    run_stream()
    feed.write(3)
    ws.wait_caught_up(feed.name)
    copied = ws.table(feed.name).copy_seq
    ws.htap("tables", "recopy", f"{ws.schema}.{feed.name}")
    wait_until(lambda: ws.table(feed.name).readable and ws.table(feed.name).copy_seq > copied, None,
               "the table to be copied again")
    feed.write(3)
    ws.wait_caught_up(feed.name)
    run_stream()
    kinds = [r["_change_type"] for r in spark.read.parquet(str(sink)).collect()]
    assert kinds.count("truncate") == 1
    assert rebuild(spark, sink) == feed.source_rows()
