"""Issue 13: online repartitioning. A table that grows tenfold after its initial copy ends with
partitions near `partition_rows` while a reader compares every read with the model (and, through
`htap serve` over Postgres, with the source's atomic batches), and a kill -9 during splits and
merges loses and duplicates nothing.

Time is a manual clock moved by the writer (0.1 s per commit), so the queryable window, the GC
seq and with them the garbage collection of what repartitions retired move the same way on any
machine; the writer waits (on conditions, never on time) for the compactor and the reader.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa

from htap.conf import HtapConfig
from htap.connectors.changes import UNSET
from htap.pushdown.replica_reader import read_plan
from htap.replica.compaction import Policy, collect_garbage, compact_table
from htap.replica.deltas import table_dir
from htap.replica.metadata import MetadataStore
from htap.replica.repartition import SPLIT_ABOVE, Counted, changes, collect_orphans, repartition, repartition_table
from htap.replica.read_plans import pin_and_plan, plan_reads, queryable_window
from htap.rewrite.pushed import table_plan

from storage_support import DirectTable, ManualClock
from test_storage_concurrency import Progress
from test_storage_properties import dv_rows, model_rows, table_rows
from workspace import wait_until

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("note", pa.string())])
HERE = Path(__file__).parent


def test_a_table_grown_tenfold_ends_with_partitions_near_partition_rows(tmp_path):
    partition_rows, initial, window_s, pin_ttl_s, rounds = 60, 150, 2.0, 3600.0, 10
    clock = ManualClock()
    table = DirectTable(tmp_path, SCHEMA, ["k"], [50, 100], clock=clock)  # the copy's three partitions
    cfg = HtapConfig(
        path=tmp_path / "htap.toml", warehouse=table.warehouse, metadata=table.store.location,
        flush_interval_s=0.1, flush_max_changes=1000, window_s=window_s, pin_ttl_s=pin_ttl_s,
        partition_rows=partition_rows,
    )
    policy = Policy(min_bytes=1, ratio=2.0, max_deltas=4)
    history: dict[int, dict] = {0: {}}
    stop = threading.Event()
    errors: list[BaseException] = []
    progress = Progress()
    progress.counts.update({"splits": 0, "merges-of-partitions": 0, "reads-before-a-repartition": 0})
    state: dict[int, tuple] = {}
    for k in range(initial):  # the initial copy, at seq 1
        state[k] = (k, 0, "copy")
        table.upsert(list(state[k]), 1)
    history[1] = dict(state)
    table.checkpoint(1)

    def writer():
        rng = random.Random(13)
        seq, next_key = 1, initial
        while len(state) < 10 * initial:
            seq += 1
            for _ in range(24):  # mostly appended keys (a serial id), some anywhere in the range
                k = next_key if rng.random() < 0.7 else rng.randrange(next_key)
                next_key += k == next_key
                state[k] = (k, seq, rng.choice([None, "a", "b"]))
                table.upsert(list(state[k]), seq)
            for k in rng.sample(sorted(state), 4):
                if rng.random() < 0.5:
                    table.upsert([k, -seq, UNSET], seq)  # partial: note unchanged
                    state[k] = (k, -seq, state[k][2])
                else:
                    table.delete([k, None, None], seq)
                    del state[k]
            history[seq] = dict(state)
            clock.advance(0.1)
            table.checkpoint(seq)
            if seq % rounds == 0:
                progress.wait_for_more(["passes", "reads-1"], stop)
        stop.set()

    def compactor():
        store = MetadataStore(table.store.location, clock=clock)
        counted: Counted = {}
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            progress.add("merges", compact_table(cfg, store, t, policy))
            for done in repartition_table(cfg.warehouse, store, t, partition_rows, counted):
                progress.add("splits" if done.action == "split" else "merges-of-partitions")
            progress.add("collected", collect_garbage(cfg, store))
            progress.add("passes")
            time.sleep(0.005)
        store.close()

    def reader(name, seed):
        rng = random.Random(seed)
        store = MetadataStore(table.store.location, clock=clock)
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            window = queryable_window(store, t, window_s)
            seq = rng.randint(window.min_seq, window.max_seq)
            pin, deltas = store.pin(t.id, seq, pin_ttl_s)
            try:
                layout = store.layout_at(t.id, seq)
                plans = plan_reads(t, deltas, seq, store.truncated_at(t.id, seq), layout=layout)
                time.sleep(rng.random() * 0.02)  # compaction, repartitions and GC run meanwhile
                rows = []
                for plan in plans:
                    for b in read_plan(cfg.warehouse, "t", SCHEMA, ["k"], plan, table_plan("s.t", SCHEMA.names), SCHEMA):
                        rows += [tuple(r.values()) for r in b.to_pylist()]
            finally:
                store.release_pin(pin.id)
            assert sorted(rows) == sorted(history[seq].values()), f"read at seq {seq} (layout from {layout.from_seq})"
            if layout.ids != store.table_by_id(t.id).layout.ids:
                progress.add("reads-before-a-repartition")  # time travel to an older layout
            progress.add(name)
        store.close()

    def guarded(fn, *args):
        def run():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                stop.set()
        return threading.Thread(target=run)

    threads = [guarded(writer), guarded(compactor), guarded(reader, "reads-1", 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]

    # Quiesced: the last repartitions, then every seq of the window reads the model.
    store = MetadataStore(table.store.location, clock=clock)
    for _ in range(20):
        if not repartition_table(cfg.warehouse, store, store.table_by_id(table.table.id), partition_rows):
            break
    t = store.table_by_id(table.table.id)
    window = queryable_window(store, t, window_s)
    for seq in range(window.min_seq, window.max_seq + 1):
        assert table_rows(table.read(seq)) == model_rows({k: list(v) for k, v in history[seq].items()}), f"at seq {seq}"
    sizes = [sum(b.num_rows for b in read_plan(cfg.warehouse, "t", SCHEMA, ["k"], plan, table_plan("s.t", SCHEMA.names), SCHEMA))
             for plan in table.plans(t.max_safe_seq)]
    store.close()
    stats = progress.counts
    print(stats, "partition sizes", sizes)
    assert sum(sizes) == len(state) >= 10 * initial
    assert max(sizes) <= SPLIT_ABOVE * partition_rows and sum(sizes) / len(sizes) >= partition_rows / 2, sizes
    assert stats["splits"] >= 10 and stats["reads-before-a-repartition"] > 0, stats
    assert stats["reads-1"] >= 10 and stats["collected"] > 0, stats


# --- kill -9 during splits and merges --------------------------------------------------------

KEYS = 900


def transaction(seq: int) -> list[tuple[str, list]]:
    """The changes of one seq (deterministic, so the model can be replayed after a kill): seq 1
    loads 600 rows, later seqs insert, update, partially update and delete a few."""
    if seq == 1:
        return [("upsert", [k, 0, "copy"]) for k in range(600)]
    a, b, c = (seq * 7) % KEYS, (seq * 13) % KEYS, (seq * 11) % KEYS
    return [("upsert", [a, seq, f"s{seq}"]), ("partial", [b, seq * 10, UNSET]), ("upsert", [(a + 450) % KEYS, -seq, None]),
            ("delete" if seq % 3 == 0 else "upsert", [c, seq, None])]


def model(upto: int) -> dict[int, list[tuple]]:
    state: dict[int, list] = {}
    history = {0: []}
    for seq in range(1, upto + 1):
        for op, row in transaction(seq):
            if op == "upsert":
                state[row[0]] = list(row)
            elif op == "partial" and row[0] in state:
                state[row[0]] = [new if new is not UNSET else old for new, old in zip(row, state[row[0]])]
            elif op == "delete":
                state.pop(row[0], None)
        history[seq] = model_rows(state)
    return history


def churn(root: Path, table_id: int) -> None:
    """The child: one transaction per seq and a split or merge each time, with the seq's
    checkpoint committed while the repartition runs (its deltas carried over), until killed."""
    table = DirectTable.reopen(root, table_id)
    seq = table.seq
    live = {r[0] for r in model(seq)[seq]}
    while True:
        seq += 1
        for op, row in transaction(seq):
            if op == "upsert":
                table.upsert(row, seq)
                live.add(row[0])
            elif op == "partial" and row[0] in live:
                table.upsert(row, seq)
            elif op == "delete":
                table.delete([row[0], None, None], seq)
                live.discard(row[0])
        rows = 40 if seq % 3 else 1000  # mostly splits, every third seq merges
        todo = changes(table.store, table.store.table_by_id(table_id), rows)

        def meanwhile(seq=seq) -> None:
            print(seq, "written", flush=True)  # the new partitions are written, not yet committed
            table.checkpoint(seq)

        if todo:
            repartition(table.warehouse, table.store, table_id, todo[0], rows, meanwhile=meanwhile)
        if table.seq < seq:
            table.checkpoint(seq)
        print(seq, todo[0].action if todo else "-", flush=True)


def test_kill_during_splits_and_merges_loses_and_duplicates_nothing(tmp_path):
    table = DirectTable(tmp_path, SCHEMA, ["k"], None)
    for op, row in transaction(1):
        table.upsert(row, 1)
    table.checkpoint(1)
    table_id = table.table.id
    table.store.close()
    actions, orphans = [], 0
    for round in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(HERE)!r}]; import test_repartition as t; "
                                   f"from pathlib import Path; t.churn(Path({str(tmp_path)!r}), {table_id})"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        seen = []
        wait_until(lambda: seen.append(child.stdout.readline()) or len(seen) >= 6, None, "six more repartitions")
        if round != 1:  # kill it between writing new partitions and their commit, once more wherever it is
            wait_until(lambda: seen.append(child.stdout.readline()) or seen[-1].endswith("written\n"), None,
                       "a repartition's new partitions written")
        child.send_signal(signal.SIGKILL)
        child.wait()
        actions += [line.split()[1] for line in seen if line.strip()]
        reader = DirectTable.reopen(tmp_path, table_id)
        durable = reader.seq
        history = model(durable)
        for seq in range(0, durable + 1):
            assert table_rows(reader.read(seq)) == history[seq], f"at seq {seq} (durable {durable})"
            assert dv_rows(reader, seq) == history[seq], f"deletion vectors at seq {seq} (durable {durable})"
        # What a killed repartition wrote and never committed is collected; nothing else is.
        orphans += collect_orphans(reader.warehouse, reader.store, reader.table, older_than_s=0)
        known = set(reader.store.delta_paths(table_id))
        folder = reader.warehouse / table_dir(reader.table)
        files = [str(f.relative_to(reader.warehouse)) for f in folder.rglob("*") if f.is_file() and not f.name.startswith(".")]
        assert all(f.removesuffix(".dv") in known for f in files), sorted(set(files) - known)
        assert table_rows(reader.read(durable)) == history[durable]
        reader.store.close()
    print("orphan files collected:", orphans)
    assert {"split", "merge"} <= set(actions), actions


# --- against a running service ---------------------------------------------------------------

def test_service_splits_a_postgres_table_grown_tenfold_while_reads_stay_exact(workspace):
    """`htap serve` over a Postgres table that grows tenfold after its initial copy, in atomic
    batches spread over the whole key range: its compaction thread splits the partitions until
    they are near `partition_rows`, while a reader at random seqs of the window (time travel to
    before the splits included) always sees whole batches, a prefix of them, never a row twice;
    at the end the replica equals the source."""
    from htap.conf import load_config
    from conftest import tune

    ws, partition_rows, per_batch, batches = workspace, 100, 200, 9
    tune(ws, compaction_interval_s=0.2, partition_rows=partition_rows)
    t = f"{ws.schema}.grown"
    ws.sql(f"CREATE TABLE {t} (id bigint PRIMARY KEY, batch int NOT NULL, note text)")
    ws.sql(f"INSERT INTO {t} SELECT g * 1000, 0, 'copy' FROM generate_series(0, {per_batch - 1}) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("grown")
    cfg = load_config(ws.config)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = {"reads": 0, "before-a-split": 0}

    def reader():
        rng = random.Random(7)
        try:
            with MetadataStore(cfg.metadata) as store:
                while not stop.is_set():
                    table = store.table_by_id(ws.table("grown").id)
                    window = queryable_window(store, table, cfg.window_s)
                    seq = rng.randint(window.min_seq, window.max_seq)
                    rows = []
                    for plan in pin_and_plan(store, table, seq, cfg.window_s, pin_ttl_s=60.0):
                        for b in read_plan(cfg.warehouse, t, table.arrow_schema, list(table.key), plan, table_plan(t, table.arrow_schema.names),
                                           table.arrow_schema):
                            rows += b.to_pylist()
                    ids = [r["id"] for r in rows]
                    per = {}
                    for r in rows:
                        per[r["batch"]] = per.get(r["batch"], 0) + 1
                    assert len(ids) == len(set(ids)), f"a row twice at seq {seq}"
                    assert sorted(per) == list(range(len(per))) and set(per.values()) == {per_batch}, (seq, per)
                    seen["reads"] += 1
                    seen["before-a-split"] += store.layout_at(table.id, seq).ids != table.layout.ids
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(1, batches + 1):  # one transaction per batch, spread over every partition
            ws.sql(f"INSERT INTO {t} SELECT g * 1000 + {i}, {i}, 'b{i}' FROM generate_series(0, {per_batch - 1}) g")
            ws.wait_caught_up("grown")
            wait_until(lambda: errors or seen["reads"] >= 2 * i, None, "reads between batches")

        def settled():
            with MetadataStore(cfg.metadata) as store:
                table = store.table_by_id(ws.table("grown").id)
                stats = store.partition_stats(table.id)
                upserts = [stats.get(p, (0, 0, 0))[1] for p in table.layout.ids]
            return errors or (max(upserts) <= SPLIT_ABOVE * partition_rows and upserts)

        sizes = wait_until(settled, None, "partitions near partition_rows")
        wait_until(lambda: errors or seen["before-a-split"] > 0, None, "a read at a seq before a split")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[0]
    print("partition row versions", sizes, seen)
    assert len(sizes) >= (batches + 1) * per_batch / (SPLIT_ABOVE * partition_rows), sizes
    assert "split partitions" in ws.log()
    with MetadataStore(cfg.metadata) as store:
        table = store.table_by_id(ws.table("grown").id)
        replica = []
        for plan in pin_and_plan(store, table, table.max_safe_seq, cfg.window_s, pin_ttl_s=60.0):
            for b in read_plan(cfg.warehouse, t, table.arrow_schema, list(table.key), plan, table_plan(t, table.arrow_schema.names), table.arrow_schema):
                replica += [tuple(r.values()) for r in b.to_pylist()]
    source = ws.sql(f"SELECT id, batch, note FROM {t}")
    assert sorted(replica) == sorted(tuple(r) for r in source)
    status = ws.htap("status", "--json")
    (row,) = [r for r in json.loads(status.stdout)["tables"] if r["table"].endswith(".grown")]
    assert row["partitions"] == len(sizes) and row["rows"] == (batches + 1) * per_batch
