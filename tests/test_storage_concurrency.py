"""Issue 3: reads running concurrently with compaction and garbage collection stay exact."""

from __future__ import annotations

import random
import threading
import time

import pyarrow as pa

from htap.conf import HtapConfig
from htap.connectors.changes import UNSET
from htap.pushdown.replica_reader import read_plan
from htap.replica.compaction import Policy, collect_garbage, compact_table
from htap.replica.metadata import MetadataStore
from htap.replica.snapshot import pin_and_plan, queryable_window
from htap.rewrite.subplan import PushedSubplan
from storage_support import DirectTable

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("note", pa.string())])
WINDOW_S = 1.0  # small, so the GC seq keeps moving while readers hold pins
PIN_TTL_S = 4.0  # readers never release pins (as in Spark): they expire, so GC gets to run


def test_reads_stay_exact_while_compaction_and_gc_run(tmp_path):
    table = DirectTable(tmp_path, SCHEMA, ["k"], [20, 40])
    cfg = HtapConfig(
        path=tmp_path / "htap.toml", warehouse=table.warehouse, metadata=table.store.location,
        flush_interval_s=0.1, flush_max_changes=1000, window_s=WINDOW_S, pin_ttl_s=PIN_TTL_S,
    )
    policy = Policy(min_bytes=1, ratio=2.0, max_deltas=3)
    history: dict[int, dict] = {0: {}}
    stop = threading.Event()
    errors: list[BaseException] = []
    stats = {"reads": 0, "merges": 0, "collected": 0}

    def writer():
        rng = random.Random(1)
        state: dict[int, list] = {}
        for seq in range(1, 120):
            for _ in range(rng.randint(1, 5)):
                k = rng.randrange(60)
                r = rng.random()
                if r < 0.55:
                    row = [k, rng.randrange(100), rng.choice([None, "a", "b"])]
                    table.upsert(row, seq)
                    state[k] = row
                elif r < 0.8 and k in state:
                    table.upsert([k, rng.randrange(100), UNSET], seq)  # partial: note unchanged
                    state[k] = [k, table.buffer.columns[1][-1], state[k][2]]
                elif k in state:
                    table.delete([k, None, None], seq)
                    del state[k]
            history[seq] = {k: tuple(v) for k, v in state.items()}
            table.checkpoint(seq)
            time.sleep(0.01)
        stop.set()

    def compactor():
        store = MetadataStore(table.store.location)
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            stats["merges"] += compact_table(cfg, store, t, policy)
            stats["collected"] += collect_garbage(cfg, store)
            time.sleep(0.02)
        store.close()

    def reader(seed):
        rng = random.Random(seed)
        store = MetadataStore(table.store.location)
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            window = queryable_window(store, t, WINDOW_S)
            seq = rng.randint(window.min_seq, window.max_seq)
            plans = pin_and_plan(store, t, seq, WINDOW_S, cfg.pin_ttl_s)
            time.sleep(rng.random() * 0.2)  # compaction and GC run meanwhile
            rows = []
            for plan in plans:
                for b in read_plan(cfg.warehouse, "t", SCHEMA, ["k"], plan, PushedSubplan(), SCHEMA):
                    rows += [tuple(r.values()) for r in b.to_pylist()]
            assert sorted(rows) == sorted(history[seq].values()), f"read at seq {seq}"
            stats["reads"] += 1
        store.close()

    def guarded(fn, *args):
        def run():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                stop.set()
        return threading.Thread(target=run)

    threads = [guarded(writer), guarded(compactor), guarded(reader, 1), guarded(reader, 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors, errors[0]
    print(stats)
    assert stats["reads"] > 10 and stats["merges"] > 10 and stats["collected"] > 0, stats
