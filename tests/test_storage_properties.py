"""Issue 3: reads at every seq of the window equal a simple model, whatever the flush and
compaction points, with inserts, updates, partial updates (also with a key change: filled from
the old key), deletes and truncates. Issue 13:
also whatever the online splits and merges of partitions (some with a checkpoint committed
while they run, whose deltas they carry over) and the garbage collection of what they retired:
time travel to before a split reads the old layout. And whatever befalls the checkpoints' key
index (htap.replica.keyindex): dropped, stale, behind, swapped by compactions, retired by
repartitions, stored on disk and read back by a restart (however old, or damaged). And compactions that restate their deletion vectors before a checkpoint commits to
the partition and swap after it (htap.replica.dv.Restatement)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htap.connectors.changes import UNSET
from htap import engine
from htap.replica import dv, keyindex, keyindex_file
from htap.replica.compaction import merge
from htap.replica.deltas import delete_delta_files, partition_dir
from htap.replica.repartition import Change, repartition
from htap.replica.warehouse import as_warehouse
from htap.rewrite.pushed import count_plan, table_plan

from storage_support import DirectTable, apply_change

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])


def model_rows(state: dict) -> list[tuple]:
    return sorted(tuple(row) for row in state.values())


def table_rows(t: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def dv_rows(table: DirectTable, seq: int, own_scan_rows: int = dv.OWN_SCAN_ROWS,
            shared_scan_rows: int = dv.SHARED_SCAN_ROWS) -> list[tuple] | None:
    """The rows at `seq` straight from the deletion-vector scans of every partition (no merge);
    None if some partition cannot be read that way. `own_scan_rows` 0: every delta with hidden
    rows scanned on its own with a positional mask (by default these small deltas share a scan
    filtered by a bitmap of their rows; `shared_scan_rows` caps how many rows one scan holds)."""
    rows = []
    for plan in table.plans(seq):
        if not plan.delta_paths:
            continue
        names = table.table.arrow_schema.names
        con = engine.cursor()
        try:
            source = dv.visible_source(con, table.warehouse, list(plan.delta_paths), seq, names, "__dv",
                                       own_scan_rows=own_scan_rows, shared_scan_rows=shared_scan_rows)
            if source is None:
                return None
            floor = f" AND _seq >= {plan.floor}" if plan.floor is not None else ""
            rows += con.sql(f"SELECT {', '.join(names)} FROM {source} WHERE _seq <= {seq} AND _op = 0{floor}").fetchall()
        finally:
            con.close()
    return sorted(rows)


def check(table: DirectTable, seq: int, history: dict, ops: list[str]) -> None:
    assert table_rows(table.read(seq)) == model_rows(history[seq]), f"at seq {seq}"
    assert table_rows(table.read_one_task(seq)) == model_rows(history[seq]), f"in one task at seq {seq}"
    via_dv = dv_rows(table, seq)
    if via_dv is not None:
        assert via_dv == model_rows(history[seq]), f"deletion vectors at seq {seq}"
        assert dv_rows(table, seq, own_scan_rows=0) == via_dv, f"deletion vectors, positional masks, at seq {seq}"
        assert dv_rows(table, seq, shared_scan_rows=1) == via_dv, f"deletion vectors, one bitmap per delta, at seq {seq}"
    else:  # partial updates are completed when written: every delta carries deletion vectors
        raise AssertionError(f"no deletion vectors at seq {seq}")


def upset_index(table: DirectTable, how: str | None) -> None:
    """Lose this process's key indexes (a crash: the stored copies, if any, are as old as the
    last `flush`), store them and lose them (a restart: the next process reads them), damage the
    stored copies, leave them covering a delta that never committed (a checkpoint that failed
    after writing it), or missing one (another process wrote it): the next checkpoint must read,
    rebuild or catch them up from the live deltas, never trust them."""
    if how == "dropped":
        keyindex.forget()
    elif how == "stored":
        keyindex.flush()
    elif how == "restarted":
        keyindex.flush()
        keyindex.forget()
    elif how == "damaged":
        keyindex.forget()
        for part in table.store.table_by_id(table.table.id).layout.ids:
            stored = keyindex_file.path_of(as_warehouse(table.warehouse).lock_dir(partition_dir(table.table, part)))
            if stored.is_file():
                raw = stored.read_bytes()
                stored.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    elif how is not None:
        for part in table.store.table_by_id(table.table.id).layout.ids:
            index = keyindex.peek(as_warehouse(table.warehouse).lock_dir(partition_dir(table.table, part)))
            if index is not None and index.built and index.covers:
                if how == "stale":
                    index.covers = index.covers | {"never-committed.parquet"}
                else:  # "behind": another process wrote its newest delta
                    index.covers = index.covers - {max(index.covers)}


def compact(table: DirectTable, data, gc_floor: int, seq: int, meanwhile=None) -> int:
    """Maybe merge some deltas of one partition (all of them: a base merge with a drawn GC seq);
    returns the new GC floor (reads below the GC seq are no longer exact)."""
    live = table.store.deltas(table.table.id)
    if len(live) < 2:
        return gc_floor
    part = data.draw(st.sampled_from(sorted({d.part for d in live})))
    mine = [d for d in live if d.part == part]
    if len(mine) < 2:
        return gc_floor
    whole = data.draw(st.booleans(), label="whole partition")
    chosen = mine if whole else data.draw(st.lists(st.sampled_from(mine), min_size=2, unique=True))
    gc = data.draw(st.integers(gc_floor, seq), label="gc seq") if whole else None
    merge(table.warehouse, table.store, table.table, part, chosen, gc, meanwhile=meanwhile)
    return gc_floor if gc is None else max(gc_floor, gc)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_reads_at_every_seq_equal_the_model(data):
    root = Path(tempfile.mkdtemp(prefix="htap-prop-"))
    keyindex.forget()  # (an earlier example's, in folders gone)
    try:
        splits = data.draw(st.sampled_from([None, [10], [5, 15, 25]]), label="splits")
        table = DirectTable(root, SCHEMA, ["k"], splits)
        state: dict[int, list] = {}
        history = {0: {}}
        gc_floor = 0
        # Partial updates (unchanged TOAST) sometimes, completed when written (see check).
        # A small key space makes one key change in several transactions of one checkpoint.
        largest = data.draw(st.sampled_from([2, 29]), label="largest key")
        keys = st.integers(0, largest)
        ops = ["upsert", "upsert", "delete", "truncate"] + (
            ["partial", "move"] if data.draw(st.booleans(), label="partials") else [])
        for seq in range(1, data.draw(st.integers(1, 30), label="transactions") + 1):
            for _ in range(data.draw(st.integers(1, 4))):
                op = data.draw(st.sampled_from(ops))
                k = data.draw(keys)
                if op == "upsert":
                    row = [k, data.draw(st.none() | st.integers(-5, 5)), data.draw(st.none() | st.text("xyz", max_size=3)),
                           data.draw(st.none() | st.floats(-1, 1, allow_nan=False))]
                    apply_change(table, state, op, k, row, seq)
                elif op == "partial" and k in state:
                    sent = [k, UNSET, data.draw(st.sampled_from([UNSET, None, "p"])), UNSET]
                    if data.draw(st.booleans()):
                        sent[1] = data.draw(st.integers(-5, 5))
                    apply_change(table, state, op, k, sent, seq)
                elif op == "move" and k in state and len(state) <= largest:
                    # A key change leaving values unchanged (Postgres: unchanged TOAST): they are
                    # the old key's, wherever its version is (buffered, or in another partition).
                    to = data.draw(st.sampled_from([x for x in range(largest + 1) if x not in state]), label="new key")
                    apply_change(table, state, op, k, [to, UNSET, data.draw(st.sampled_from([UNSET, None, "m"])), UNSET], seq)
                elif (op == "delete" and k in state) or op == "truncate":
                    apply_change(table, state, op, k, None, seq)
            history[seq] = {k: list(v) for k, v in state.items()}
            if data.draw(st.booleans(), label="checkpoint"):
                upset_index(table, data.draw(st.sampled_from([None, None, "dropped", "stale", "behind", "stored", "restarted", "damaged"]),
                                             label="key index"))
                # A split or merge first, maybe with this checkpoint committed while it runs.
                action = data.draw(st.sampled_from([None, "split", "split", "merge"]), label="repartition")
                ids = table.store.table_by_id(table.table.id).layout.ids
                done = []  # the checkpoint, once it ran while the repartition did
                if action == "split" or (action == "merge" and len(ids) > 1):
                    if action == "split":  # the partition with the most row versions
                        stats = table.store.partition_stats(table.table.id)
                        parts = (max(ids, key=lambda p: stats.get(p, (0, 0, 0))[1]),)
                    else:
                        first = data.draw(st.integers(0, len(ids) - 2))
                        parts = ids[first:first + 2]
                    during = len(table.buffer) > 0 and data.draw(st.booleans(), label="checkpoint during it")
                    repartition(table.warehouse, table.store, table.table.id, Change(action, parts, "test"),
                                data.draw(st.integers(1, 3), label="partition rows"),
                                meanwhile=(lambda: done.append(table.checkpoint(seq))) if during else None)
                if not done and len(table.buffer) > 0 and data.draw(st.booleans(), label="compaction during it"):
                    # A compaction that restated its deletion vectors before this checkpoint
                    # committed a delta to the partition, and takes the lock after it.
                    gc_floor = compact(table, data, gc_floor, seq, meanwhile=lambda: done.append(table.checkpoint(seq)))
                if not done:
                    table.checkpoint(seq)
                table.table = table.store.table_by_id(table.table.id)
                if data.draw(st.booleans(), label="collect garbage"):  # the window's low end moves up
                    gc_floor = data.draw(st.integers(gc_floor, seq), label="window low")
                    for path in table.store.collect_garbage({table.table.id: gc_floor}):
                        delete_delta_files(table.warehouse, path)
                # Time travel now, before later compactions raise the GC floor past this seq.
                check(table, data.draw(st.integers(gc_floor, seq), label="read at"), history, ops)
                if data.draw(st.booleans(), label="compact"):
                    gc_floor = compact(table, data, gc_floor, seq)
        table.checkpoint(max(history))
        for seq in range(gc_floor, max(history) + 1):
            check(table, seq, history, ops)
        table.store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_deletion_vectors_time_travel_compaction_and_damage(tmp_path):
    """One key changed by two transactions of one checkpoint over an older delta: every seq reads
    exactly its version through the deletion vectors, after a tier merge too; a damaged or
    missing sidecar is never trusted (the read merges instead and stays exact)."""
    schema = pa.schema([("k", pa.int64()), ("a", pa.int64())])
    table = DirectTable(tmp_path, schema, ["k"], None)
    table.upsert([1, 10], 1)
    table.upsert([2, 20], 1)
    table.checkpoint(1)
    table.upsert([1, 11], 2)
    table.upsert([1, 12], 3)
    table.delete([2, None], 3)
    table.checkpoint(3)
    want = {1: [(1, 10), (2, 20)], 2: [(1, 11), (2, 20)], 3: [(1, 12)]}

    def exact(how: str) -> None:
        for seq, rows in want.items():
            assert table_rows(table.read(seq)) == rows, f"{how}: at seq {seq}"

    for seq, rows in want.items():
        assert dv_rows(table, seq) == rows, f"at seq {seq}"
    exact("deletion vectors")
    live = table.store.deltas(table.table.id)
    merge(table.warehouse, table.store, table.table, 0, live, None)  # tier merge: every version kept
    (merged,) = table.store.deltas(table.table.id)
    for seq, rows in want.items():
        assert dv_rows(table, seq) == rows, f"after the merge, at seq {seq}"
    side = table.warehouse / dv.sidecar(merged.path)
    side.write_bytes(side.read_bytes()[:-9])  # damaged
    assert dv_rows(table, 2) is None
    exact("damaged sidecar")
    side.unlink()
    assert dv_rows(table, 2) is None
    exact("missing sidecar")


def test_one_task_read_of_partitions_with_one_damaged_sidecar(tmp_path):
    """A one-task read loads every partition's deletion vectors at once (htap.replica.dv.load):
    a sidecar that does not hold what its footer promises costs only its own partition the
    deletion-vector scan (it merges), an unreadable one makes each partition load its own; the
    rows stay exact either way."""
    schema = pa.schema([("k", pa.int64()), ("a", pa.int64())])
    table = DirectTable(tmp_path, schema, ["k"], [10, 20])
    for k in range(30):
        table.upsert([k, k], 1)
    table.checkpoint(1)
    for k in range(0, 30, 3):
        table.upsert([k, -k], 2)
    table.checkpoint(2)
    want = sorted((k, -k if k % 3 == 0 else k) for k in range(30))
    assert table_rows(table.read_one_task(2)) == want
    plans = table.plans(2)
    paths = [p for plan in plans for p in plan.delta_paths]
    con = engine.cursor()
    vectors = dv.load(table.warehouse, paths, 2)
    assert all(vectors.hidden(list(plan.delta_paths)) for plan in plans)  # each partition hides its updated rows
    newest = next(p for p in plans[0].delta_paths if vectors.promised.get(p))  # the update delta (names are random)
    side = table.warehouse / dv.sidecar(newest)
    original = side.read_bytes()
    other = pa.table({"target": ["x"], "row": pa.array([0], pa.int64()), "seq": pa.array([1], pa.int64())})
    dv.write_sidecar(side, other)  # readable, but not the entries the footer promises
    vectors = dv.load(table.warehouse, paths, 2)
    assert vectors.hidden(list(plans[0].delta_paths)) is None
    assert all(vectors.hidden(list(plan.delta_paths)) for plan in plans[1:])
    assert table_rows(table.read_one_task(2)) == want
    side.write_bytes(original[:-9])  # unreadable: the shared load fails, each partition loads its own
    assert dv.load(table.warehouse, paths, 2) is None
    assert table_rows(table.read_one_task(2)) == want
    con.close()


def test_a_row_moved_away_and_back_past_versions_of_its_key_keeps_its_values(tmp_path):
    """Found by the model test: 0 -> 1, then 0 re-inserted and deleted, then 1 -> 0, all values
    unchanged: they are key 0's as before the checkpoint, not its deleted version's NULLs."""
    table = DirectTable(tmp_path, SCHEMA, ["k"], None)
    table.upsert([0, 7, "x", 0.5], 5)
    table.checkpoint(5)
    table.change_key([0, None, None, None], [1, UNSET, UNSET, UNSET], 6)
    table.upsert([0, None, None, None], 7)
    table.delete([0, None, None, None], 7)
    table.change_key([1, None, None, None], [0, UNSET, UNSET, UNSET], 7)
    table.checkpoint(7)
    assert table_rows(table.read(6)) == [(1, 7, "x", 0.5)]
    assert table_rows(table.read(7)) == [(0, 7, "x", 0.5)]


def test_deletion_vector_scans_of_every_kind_at_every_seq(tmp_path):
    """A partition whose deltas take each of the three scans (htap.replica.dv.visible_source): a
    delta none of whose rows is hidden (scanned plainly, with no mask), deltas with hidden rows
    scanned on their own with a positional mask, and short ones sharing scans filtered by a bitmap
    of their rows — in every mix the thresholds allow; every seq reads exactly its rows, -0.0
    and NULLs included, through the reader too, also when only some columns or a count are asked."""
    schema = pa.schema([("k", pa.int64()), ("a", pa.float64()), ("b", pa.string())])
    table = DirectTable(tmp_path, schema, ["k"], None)
    state: dict[int, tuple] = {}
    history = {}
    for k in range(40):
        state[k] = (k, -0.0 if k % 7 == 0 else float(k), None if k % 5 == 0 else f"v{k}")
        table.upsert(list(state[k]), 1)
    table.checkpoint(1)
    history[1] = dict(state)
    for seq, keys in ((2, range(0, 40, 3)), (3, range(0, 40, 4)), (4, range(100, 105)), (5, range(1, 40, 6))):
        for k in keys:
            state[k] = (k, -0.0 if seq == 3 else float(seq * 1000 + k), None if seq == 5 else f"s{seq}")
            table.upsert(list(state[k]), seq)
        if seq == 5:
            table.delete([6, None, None], seq)
            state.pop(6)
        table.checkpoint(seq)
        history[seq] = dict(state)
    # at seq 5 the delta of seq 4 (new keys only) has no hidden rows: it is scanned plainly
    for seq, rows in history.items():
        want = model_rows(rows)
        for own, shared in ((0, 100), (10, 100), (15, 100), (41, 100), (41, 12), (41, 25), (41, 1), (dv.OWN_SCAN_ROWS, 10**6)):
            got = dv_rows(table, seq, own_scan_rows=own, shared_scan_rows=shared)
            assert got == want, f"at seq {seq}, own scans from {own} rows, shared ones of {shared} rows at most"
            assert [str(r[1]) for r in got] == [str(r[1]) for r in want]  # -0.0 kept its sign
        assert table_rows(table.read(seq)) == want, f"reader at seq {seq}"
        assert table_rows(table.read_one_task(seq)) == want, f"one task at seq {seq}"
        only_b = table.read(seq, table_plan("s.t", ["b"]), pa.schema([schema.field("b")]))
        assert sorted(only_b.column("b").to_pylist(), key=str) == sorted((r[2] for r in want), key=str)
        count = table.read(seq, count_plan("s.t"), pa.schema([("n", pa.int64())]))
        assert sum(count.column("n").to_pylist()) == len(want), f"count at seq {seq}"


def test_one_task_read_at_an_older_seq_filters_every_partition_by_seq(tmp_path):
    """The model test's find (splits [5, 15, 25]): a partition's own plan may leave out the
    `_seq` filter when none of its versions is newer than the read; the one read of all
    partitions must not take that from the first one, or key 5's newer version shows at seq 1."""
    table = DirectTable(tmp_path, SCHEMA, ["k"], [5, 15, 25])
    table.upsert([5, None, None, None], 1)
    table.upsert([1, None, None, None], 1)
    table.upsert([5, 1, None, 0.25], 2)
    table.checkpoint(2)
    assert table_rows(table.read_one_task(1)) == [(1, None, None, None), (5, None, None, None)]
    assert table_rows(table.read_one_task(2)) == [(1, None, None, None), (5, 1, None, 0.25)]
    assert table_rows(table.read(1)) == table_rows(table.read_one_task(1))
