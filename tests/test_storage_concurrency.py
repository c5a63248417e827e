"""Issue 3: reads running concurrently with compaction and garbage collection stay exact.

Time is a manual clock moved by the writer (0.1 s per commit), so the queryable window and the
GC seq move the same way on any machine; the threads run freely, and the writer waits (on
conditions, never on time) until the compactor and both readers have made progress between
rounds, so every run merges, collects and reads at many seqs, however fast or loaded the machine.
"""

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
from htap.replica.read_plans import plan_reads, queryable_window
from htap.rewrite.pushed import table_plan

from storage_support import DirectTable, ManualClock

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("note", pa.string())])
WINDOW_S = 1.0  # ten commits of the manual clock: the GC seq keeps moving
PIN_TTL_S = 3600.0  # pins end when a read ends (released), not by expiry
SEQS = 120
ROUND = 10  # commits between the writer's waits for the others' progress


class Progress:
    """Counters the writer waits on."""

    def __init__(self):
        self.cond = threading.Condition()
        self.counts = {"reads-1": 0, "reads-2": 0, "passes": 0, "merges": 0, "collected": 0}

    def add(self, name: str, n: int = 1) -> None:
        with self.cond:
            self.counts[name] += n
            self.cond.notify_all()

    def wait_for_more(self, names: list[str], stop: threading.Event, timeout: float = 300) -> None:
        with self.cond:
            start = {n: self.counts[n] for n in names}
            ok = self.cond.wait_for(lambda: stop.is_set() or all(self.counts[n] > start[n] for n in names), timeout)
        assert ok, f"no progress of {names} within {timeout} s: {self.counts}"


def test_reads_stay_exact_while_compaction_and_gc_run(tmp_path):
    clock = ManualClock()
    table = DirectTable(tmp_path, SCHEMA, ["k"], [20, 40], clock=clock)
    cfg = HtapConfig(
        path=tmp_path / "htap.toml", warehouse=table.warehouse, metadata=table.store.location,
        flush_interval_s=0.1, flush_max_changes=1000, window_s=WINDOW_S, pin_ttl_s=PIN_TTL_S,
    )
    policy = Policy(min_bytes=1, ratio=2.0, max_deltas=3)
    history: dict[int, dict] = {0: {}}
    stop = threading.Event()
    errors: list[BaseException] = []
    progress = Progress()

    def writer():
        rng = random.Random(1)
        state: dict[int, list] = {}
        for seq in range(1, SEQS + 1):
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
            clock.advance(0.1)
            table.checkpoint(seq)
            if seq % ROUND == 0:
                progress.wait_for_more(["passes", "reads-1", "reads-2"], stop)
        stop.set()

    def compactor():
        store = MetadataStore(table.store.location, clock=clock)
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            progress.add("merges", compact_table(cfg, store, t, policy))
            progress.add("collected", collect_garbage(cfg, store))
            progress.add("passes")
            time.sleep(0.005)
        store.close()

    def reader(name, seed):
        rng = random.Random(seed)
        store = MetadataStore(table.store.location, clock=clock)
        while not stop.is_set():
            t = store.table_by_id(table.table.id)
            window = queryable_window(store, t, WINDOW_S)
            seq = rng.randint(window.min_seq, window.max_seq)
            pin, deltas = store.pin(t.id, seq, PIN_TTL_S)  # a seq the window held a moment ago: still pinned
            try:
                plans = plan_reads(t, deltas, seq, store.truncated_at(t.id, seq))
                time.sleep(rng.random() * 0.02)  # compaction and GC run meanwhile
                rows = []
                for plan in plans:
                    for b in read_plan(cfg.warehouse, "t", SCHEMA, ["k"], plan, table_plan("s.t", SCHEMA.names), SCHEMA):
                        rows += [tuple(r.values()) for r in b.to_pylist()]
            finally:
                store.release_pin(pin.id)
            assert sorted(rows) == sorted(history[seq].values()), f"read at seq {seq}"
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

    threads = [guarded(writer), guarded(compactor), guarded(reader, "reads-1", 1), guarded(reader, "reads-2", 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]

    # Quiesced: once the window has moved past everything, one more pass folds the history into
    # one delta per partition and every retired file goes.
    clock.advance(10 * WINDOW_S)
    store = MetadataStore(table.store.location, clock=clock)
    t = store.table_by_id(table.table.id)
    progress.add("merges", compact_table(cfg, store, t, Policy(min_bytes=1, ratio=2.0, max_deltas=1)))
    progress.add("collected", collect_garbage(cfg, store))
    retired_left = store._one("SELECT count(*) FROM deltas WHERE retired_at IS NOT NULL")[0]
    store.close()
    stats = progress.counts
    print(stats)
    assert stats["reads-1"] >= SEQS // ROUND and stats["reads-2"] >= SEQS // ROUND, stats
    assert stats["merges"] >= SEQS // ROUND and stats["collected"] > 0 and retired_left == 0, stats
    assert sorted(table.read(SEQS).to_pylist(), key=lambda r: r["k"]) == [
        dict(zip(SCHEMA.names, v)) for _, v in sorted(history[SEQS].items())
    ]
