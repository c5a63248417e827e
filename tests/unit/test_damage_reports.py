"""The driver's side of a damage report (issue 15 item 3): a task's error names a delta; the
driver's bridge call marks the table only if that file is a live delta of a table of its
catalog's source and is damaged on disk. A report is text from a failed query, which a Spark
user can write too (`raise_error`), so nothing in it is trusted."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from htap.catalog import bridge
from htap.conf import render_config
from htap.pushdown.datasource import DAMAGE_MARKER, damage_report
from htap.errors import DamagedReplicaError
from htap.replica.metadata import MetadataStore, NewDelta
from htap.replica.models import STATE_STREAMING, Column
from htap.replica.read_plans import ReadPlan


def setup(tmp: Path) -> tuple[Path, int, int]:
    config = tmp / "htap.toml"
    config.write_text(render_config("shop", "host=127.0.0.1 dbname=none"))
    (tmp / "warehouse").mkdir()
    store = MetadataStore(tmp / "warehouse" / "metadata.db", create=True)
    ids = []
    for name in ("t", "u"):
        t = store.add_table("shop", "public", name, [Column("id", "integer", False)], ["id"], "schema")
        store.start_copy(t.id)
        path = f"{name}/d1.parquet"
        (tmp / "warehouse" / name).mkdir()
        pq.write_table(pa.table({"id": list(range(100))}), tmp / "warehouse" / path)
        store.finish_copy(t.id, [NewDelta(t.id, path, 1, 1, 100, 1000)], 1, None)
        store.set_state(t.id, STATE_STREAMING)
        ids.append(t.id)
    store.close()
    return config, ids[0], ids[1]


def report(config: Path, table_id: int, delta: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert bridge.main(["--config", str(config), "report-damage", str(table_id), delta]) == 0
    return json.loads(out.getvalue())


def state(config: Path, table_id: int) -> str:
    with MetadataStore(config.parent / "warehouse" / "metadata.db") as store:
        return store.table_by_id(table_id).state


def test_only_a_damaged_live_delta_of_the_table_marks_it(tmp_path):
    config, t, u = setup(tmp_path)
    assert report(config, t, "t/d1.parquet") == {"marked": False, "why": "t/d1.parquet of shop.public.t is intact"}
    assert not report(config, t, "u/d1.parquet")["marked"]  # another table's delta
    assert not report(config, t, "t/nope.parquet")["marked"]  # not a live delta
    assert not report(config, 999, "t/d1.parquet")["marked"]
    assert state(config, t) == state(config, u) == STATE_STREAMING
    (tmp_path / "warehouse" / "t" / "d1.parquet").write_bytes(b"not parquet" * 20)
    marked = report(config, t, "t/d1.parquet")
    assert marked["marked"] and "t/d1.parquet is corrupt" in marked["error"]
    assert state(config, t) == "unhealthy" and state(config, u) == STATE_STREAMING


def test_a_tasks_report_names_the_table_and_the_plans_damaged_delta():
    plan = ReadPlan(part=0, seq=5, delta_paths=("t/d0.parquet", "t/d1.parquet"), floor=None, partial=False)
    error = DamagedReplicaError("damaged replica: delta file /wh/t/d1.parquet is corrupt: bad magic (table s.public.t)")
    text = damage_report(7, plan, error)
    facts, message = text[len(DAMAGE_MARKER):].split(" ", 1)
    assert text.startswith(DAMAGE_MARKER) and json.loads(facts) == {"table_id": 7, "delta": "t/d1.parquet"}
    assert message == str(error)
