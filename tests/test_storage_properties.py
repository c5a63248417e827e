"""Issue 3: reads at every seq of the window equal a simple model, whatever the flush and
compaction points, with inserts, updates, partial updates, deletes and truncates."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htap.connectors.changes import UNSET
from htap.replica.compaction import merge

from storage_support import DirectTable

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
KEYS = st.integers(0, 29)


def model_rows(state: dict) -> list[tuple]:
    return sorted(tuple(row) for row in state.values())


def table_rows(t: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_reads_at_every_seq_equal_the_model(data):
    root = Path(tempfile.mkdtemp(prefix="htap-prop-"))
    try:
        splits = data.draw(st.sampled_from([None, [10], [5, 15, 25]]), label="splits")
        table = DirectTable(root, SCHEMA, ["k"], splits)
        state: dict[int, list] = {}
        history = {0: {}}
        gc_floor = 0
        for seq in range(1, data.draw(st.integers(1, 30), label="transactions") + 1):
            for _ in range(data.draw(st.integers(1, 4))):
                op = data.draw(st.sampled_from(["upsert", "upsert", "partial", "delete", "truncate"]))
                k = data.draw(KEYS)
                if op == "upsert":
                    row = [k, data.draw(st.none() | st.integers(-5, 5)), data.draw(st.none() | st.text("xyz", max_size=3)),
                           data.draw(st.none() | st.floats(-1, 1, allow_nan=False))]
                    table.upsert(row, seq)
                    state[k] = row
                elif op == "partial" and k in state:
                    sent = [k, UNSET, data.draw(st.sampled_from([UNSET, None, "p"])), UNSET]
                    if data.draw(st.booleans()):
                        sent[1] = data.draw(st.integers(-5, 5))
                    table.upsert(sent, seq)
                    state[k] = [old if new is UNSET else new for new, old in zip(sent, state[k])]
                elif op == "delete" and k in state:
                    table.delete([k, None, None, None], seq)
                    del state[k]
                elif op == "truncate":
                    table.truncate(seq)
                    state.clear()
            history[seq] = {k: list(v) for k, v in state.items()}
            if data.draw(st.booleans(), label="checkpoint"):
                table.checkpoint(seq)
                live = table.store.deltas(table.table.id)
                if len(live) >= 2 and data.draw(st.booleans(), label="compact"):
                    part = data.draw(st.sampled_from(sorted({d.part for d in live})))
                    mine = [d for d in live if d.part == part]
                    if len(mine) >= 2:
                        whole = data.draw(st.booleans(), label="whole partition")
                        chosen = mine if whole else data.draw(st.lists(st.sampled_from(mine), min_size=2, unique=True))
                        gc = data.draw(st.integers(gc_floor, seq), label="gc seq") if whole else None
                        merge(table.warehouse, table.store, table.table, part, chosen, gc)
                        if gc is not None:
                            gc_floor = max(gc_floor, gc)  # reads below the GC seq are no longer exact
        table.checkpoint(max(history))
        for seq in range(gc_floor, max(history) + 1):
            assert table_rows(table.read(seq)) == model_rows(history[seq]), f"at seq {seq}"
        table.store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
