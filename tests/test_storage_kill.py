"""kill -9 while checkpoints maintain deletion vectors loses and duplicates nothing.

A child process writes a deterministic history (one transaction per seq, a few keys updated,
deleted and partially updated, one checkpoint per seq: the probe of older deltas, the sidecar
and the completion of partial updates run all the time) and is killed with SIGKILL at an
arbitrary point, three times over, each time resuming from the durable seq. After each kill
every seq up to the durable one reads exactly the model, through deletion vectors (a sidecar
left half-written by the kill belongs to an uncommitted delta and is never read).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from htap.connectors.changes import UNSET

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
        table.checkpoint(seq)
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
        durable = reader.seq
        history = model(durable)
        for seq in range(0, durable + 1):
            assert table_rows(reader.read(seq)) == history[seq], f"at seq {seq} (durable {durable})"
            assert dv_rows(reader, seq) == history[seq], f"deletion vectors at seq {seq} (durable {durable})"
        reader.store.close()
