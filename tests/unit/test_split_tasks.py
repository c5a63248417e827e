"""The tasks of a split pushed subtree (htap.pushdown.planning._groups and _split_task, issue 30):
one per run of neighbouring partitions of the split table, a co-partitioned table read only by
that run's key range. Property: over random rows, random partition bounds of both tables and a
random cap on the tasks, the tasks' partial aggregates add up to the one-task answer — whether
the co-partitioned column is the other table's own partition column (its partitions pruned too)
or another of its columns.

Real deltas on local disk, read by the executor's reader (read_joined); no server.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import HEAVY_PROPERTY, agg, col, make_delta, make_table, op

from htap.pushdown.planning import ScanPlan, _groups, _split_task
from htap.pushdown.replica_reader import JoinedTableRead, read_joined
from htap.replica.models import OP, OP_UPSERT, SEQ, UNSET_MASK, delta_schema
from htap.replica.partitions import split_by_partition
from htap.replica.read_plans import plan_reads
from htap.rewrite.pushed import Node, PlanError, PushedPlan, Scan, to_json

T1 = pa.schema([("k", pa.int64()), ("a", pa.int64())])
T2 = pa.schema([("k2", pa.int64()), ("fk", pa.int64())])
OUT = pa.schema([("n", pa.int64()), ("matched", pa.int64()), ("s", pa.int64())])


def _plan(on: str, join_type: str) -> PushedPlan:
    """count(*), count(t2's key), sum(t1.a) over t1 JOIN t2 ON t1.k = t2.<on>, split by t1, t2
    co-partitioned by `on` (a semi join: t1's rows only, its key counted)."""
    join = Node("join", (Node("scan", scan=0, output=("c1", "c2")), Node("scan", scan=1, output=("c3", "c4"))),
                cond=op("=", col("c1", "bigint"), col("c3" if on == "k2" else "c4", "bigint")), join_type=join_type)
    counted = col("c1" if join_type == "semi" else "c3", "bigint")
    exprs = (("n", agg("count_star")), ("matched", agg("count", counted)), ("s", agg("sum", col("c2", "bigint"))))
    return PushedPlan((Scan("public.t1", ("k", "a")), Scan("public.t2", ("k2", "fk"))),
                      Node("aggregate", (join,), exprs=exprs, partial=True), split=0, co_split=((1, on),))


def _table_reads(folder: Path, name: str, schema: pa.Schema, rows: dict, splits: list, table_id: int):
    """The table's rows as one delta per partition (seq 1), and its read plans at seq 1."""
    table = make_table(schema, (schema.names[0],), id=table_id, name=name, splits=splits or None)
    data = pa.Table.from_pylist(
        [{schema.names[0]: k, schema.names[1]: v, SEQ: 1, OP: OP_UPSERT, UNSET_MASK: 0} for k, v in sorted(rows.items())],
        schema=delta_schema(schema))
    bounds = pa.array(splits, pa.int64()) if splits else None
    deltas = []
    for part, part_rows in split_by_partition(data, schema.names[0], bounds):
        path = f"{name}p{part}.parquet"
        pq.write_table(part_rows, folder / path)
        deltas.append(make_delta(1, part=part, path=path, table_id=table_id))
    return ScanPlan(table, None, tuple(plan_reads(table, deltas, 1, None)))


def _read(folder: Path, plans, reads, plan: PushedPlan) -> tuple:
    tables = [JoinedTableRead(f"src.public.{p.table.name}", s, [s.names[0]], r)
              for p, r, s in zip(plans, reads, (T1, T2))]
    rows = pa.Table.from_batches(list(read_joined(folder, tables, plan, OUT)), schema=OUT).to_pylist()
    assert len(rows) == 1
    return rows[0]["n"], rows[0]["matched"], rows[0]["s"] or 0


keys = st.integers(0, 12)  # few keys: bounds of both tables often meet


@HEAVY_PROPERTY
@given(
    t1=st.dictionaries(keys, st.integers(-5, 5), max_size=20),
    t2=st.dictionaries(keys, keys, max_size=20),
    splits1=st.lists(st.integers(1, 11), max_size=4, unique=True).map(sorted),
    splits2=st.lists(st.integers(1, 11), max_size=4, unique=True).map(sorted),
    on=st.sampled_from(["k2", "fk"]),
    join_type=st.sampled_from(["inner", "left", "semi"]),
    tasks=st.none() | st.integers(1, 4),
)
def test_split_tasks_with_a_co_partitioned_table_add_up_to_one_task(t1, t2, splits1, splits2, on, join_type, tasks):
    folder = Path(tempfile.mkdtemp())
    try:
        plans = [_table_reads(folder, "t1", T1, t1, splits1, 1), _table_reads(folder, "t2", T2, t2, splits2, 2)]
        plan = _plan(on, join_type)
        one = _read(folder, plans, [p.reads for p in plans], plan)
        total = [0, 0, 0]
        groups = _groups(plans[0].reads, tasks)
        assert [r for g in groups for r in g] == list(plans[0].reads)
        assert len(groups) == (len(plans[0].reads) if tasks is None else min(tasks, len(plans[0].reads)))
        for group in groups:
            parts, pushed = _split_task(plan, plans, group, to_json(plan))
            task = PushedPlan.from_json(pushed)
            bounds = (group[0].key_range[0], group[-1].key_range[1])
            assert len(task.scans[1].filter) == sum(b is not None for b in bounds)
            if on == "k2":  # its own partition column: only t2's partitions that meet the range
                assert len(parts[1].plans) <= len(plans[1].reads)
            for i, n in enumerate(_read(folder, plans, [p.plans for p in parts], task)):
                total[i] += n
        assert tuple(total) == one
    finally:
        shutil.rmtree(folder)


def test_a_co_split_must_name_another_scan_and_a_column_it_reads_and_split_tasks_count():
    plan = _plan("fk", "inner")
    assert PushedPlan.from_json(to_json(plan)).co_split == ((1, "fk"),)
    raw = to_json(plan)
    for bad in ('[[0,"k"]]', '[[1,"a"]]', '[[2,"fk"]]', '[1]'):
        with pytest.raises(PlanError, match="co_split"):
            PushedPlan.from_json(raw.replace('[[1,"fk"]]', bad))
    with pytest.raises(PlanError, match="co_split"):
        PushedPlan.from_json(raw.replace('"split":0,', ""))
    assert PushedPlan.from_json(raw.replace('"split":0,', '"split":0,"split_tasks":3,')).split_tasks == 3
    for bad in ('"split_tasks":0,', '"split_tasks":-1,', '"split_tasks":true,'):
        with pytest.raises(PlanError, match="split_tasks"):
            PushedPlan.from_json(raw.replace('"split":0,', '"split":0,' + bad))
