"""kill -9 while checkpoints maintain deletion vectors loses and duplicates nothing.

A child process writes a deterministic history (one transaction per seq, a few keys updated,
deleted and partially updated, one checkpoint per seq: the probe of older deltas, the sidecar
and the completion of partial updates run all the time) and is killed with SIGKILL at an
arbitrary point, three times over, each time resuming from the durable seq. After each kill
every seq up to the durable one reads exactly the model, through deletion vectors (a sidecar
left half-written by the kill belongs to an uncommitted delta and is never read).

The child also stores its key indexes after every checkpoint and compacts now and then
(htap.replica.keyindex_file), so kills land in those writes too: the next process reads the
stored index if it is intact and covers only live deltas (catching up with those added since),
else rebuilds it, and either way it answers what one built from the live deltas answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from htap.connectors.changes import UNSET
from htap.replica import keyindex, keyindex_file
from htap.replica.compaction import merge
from htap.replica.deltas import partition_dir
from htap.replica.warehouse import as_warehouse

from storage_support import DirectTable
from test_storage_properties import dv_rows, model_rows, table_rows
from workspace import wait_until

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
HERE = Path(__file__).parent


def transaction(seq: int) -> list[tuple[str, list]]:
    """The changes of one seq: deterministic, so the model can be replayed after a kill."""
    k1, k2, k3 = seq % 13, (seq * 7) % 13, (seq * 5) % 13
    return [("upsert", [k1, seq, f"s{seq}"]), ("partial", [k2, seq * 10, UNSET]),
            ("delete" if seq % 4 == 0 else "upsert", [k3, -seq, None])]


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


def write(root: Path, table_id: int) -> None:
    """The child: resume after the durable seq and checkpoint every seq until killed."""
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
        if seq % 5 == 0:  # a tier merge of one partition: the stored index no longer covers live deltas
            part = seq // 5 % 2
            mine = table.store.deltas(table.table.id, part)
            if len(mine) > 2:
                merge(table.warehouse, table.store, table.table, part, mine[-3:], None)
        table.checkpoint(seq)
        keyindex.flush()  # every index, after every checkpoint
        print(seq, flush=True)


def test_kill_during_checkpoints_loses_and_duplicates_nothing(tmp_path):
    table = DirectTable(tmp_path, SCHEMA, ["k"], [6])
    table_id = table.table.id
    table.store.close()
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(HERE)!r}]; import test_storage_kill as t; "
                                   f"from pathlib import Path; t.write(Path({str(tmp_path)!r}), {table_id})"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        seen = []
        wait_until(lambda: seen.append(child.stdout.readline()) or len(seen) >= 5, None, "five more checkpoints")
        child.send_signal(signal.SIGKILL)  # wherever it is: most of its time is in write_partitioned
        child.wait()
        reader = DirectTable.reopen(tmp_path, table_id)
        opened = stored_indexes_are_read_or_rebuilt_exactly(reader)
        assert set(opened) <= {"loaded", "stale"}, opened  # a kill never leaves a damaged file behind
        durable = reader.seq
        history = model(durable)
        for seq in range(0, durable + 1):
            assert table_rows(reader.read(seq)) == history[seq], f"at seq {seq} (durable {durable})"
            assert dv_rows(reader, seq) == history[seq], f"deletion vectors at seq {seq} (durable {durable})"
        reader.store.close()


def stored_indexes_are_read_or_rebuilt_exactly(table: DirectTable) -> list[str]:
    """Open each partition's index as a new process would, and check it answers what one built
    from the live deltas does; store it again (the next child reads it). Returns how each was
    opened."""
    keyindex.forget()
    key_schema = pa.schema([table.table.arrow_schema.field("k")])
    probe = pa.table({"k": pa.array(range(13), pa.int64())})
    outcomes, folders = [], []
    for part in table.table.layout.ids:
        folders.append(folder := as_warehouse(table.warehouse).lock_dir(partition_dir(table.table, part)))
        index = keyindex.of(folder, key_schema)
        outcomes.append(index.opened)
        live = table.live(part)
        index.sync(table.warehouse, live)
        fresh = keyindex.KeyIndex(key_schema)
        fresh.sync(table.warehouse, live)
        got, want = index.where(probe), fresh.where(probe)
        assert got[0].to_pylist() == want[0].to_pylist() and got[1].tolist() == want[1].tolist(), f"partition {part}"
        assert got[2].tolist() == want[2].tolist()
    keyindex.flush()
    for folder in folders:
        assert not list(folder.glob(f"{keyindex_file.FILE}.*.tmp")), "a killed writer's temporary file was left"
    keyindex.forget()
    return outcomes
