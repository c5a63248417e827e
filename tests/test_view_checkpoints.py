"""Issue 31, maintenance from real checkpoints: what `write_partitioned` reports a checkpoint
changed (htap.replica.deltas.Changed — the versions as stored, partial updates completed, and
each changed key's newest live version, found through the partition's key index) is exactly
what htap.replica.view_maintenance.group_changes needs. Random histories — inserts, partial
updates (unchanged TOAST), key changes across partitions, deletes, truncations, several
transactions per checkpoint — are written as the ingest service writes them; the view, advanced
checkpoint by checkpoint from those reports only, equals the aggregate of the replica read at
every seq."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htap import engine
from htap.connectors.changes import UNSET
from htap.replica import keyindex
from htap.replica.models import SEQ
from htap.replica.view_maintenance import ROWS, ViewShape, checkpoint_changes, group_changes
from htap.rewrite.views import parse_view

from storage_support import DirectTable, ViewVersions, apply_change

SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.int64()), ("x", pa.int64()), ("f", pa.int64())])
COLUMNS = SCHEMA.names


def _aggregate_sql(shape: ViewShape, relation: str, where: str = "") -> str:
    """The view's states over `relation` (the base's rows), by group."""
    states = [f"count(*) AS {ROWS}"] + [f"{a.fn}({a.arg}) AS {a.name}" for a in shape.aggregates]
    conditions = [c for c in (f"({shape.filter_sql}) IS TRUE" if shape.filter_sql else "", where) if c]
    groups = ", ".join(shape.groups)
    return (f"SELECT {groups + ', ' if groups else ''}{', '.join(states)} FROM {relation}"
            f"{' WHERE ' + ' AND '.join(conditions) if conditions else ''}{' GROUP BY ' + groups if groups else ''}")


def _expected(shape: ViewShape, rows: pa.Table) -> dict:
    con = engine.cursor()
    try:
        con.register("base", rows)
        out = con.sql(_aggregate_sql(shape, "base")).to_arrow_table().to_pylist()
    finally:
        con.close()
    return {tuple(r[c] for c in shape.groups): _ints(r[c] for c in shape.state_columns()) for r in out}


def _ints(values) -> tuple:
    return tuple(None if v is None else int(v) for v in values)


def _extremes(shape: ViewShape, at_p: pa.Table, changed_keys: pa.Array):
    """MIN/MAX at P of the rows the checkpoint leaves alone, for the groups asked."""
    def read(groups: pa.Table) -> pa.Table:
        alone = at_p.filter(pc.invert(pc.is_in(at_p.column("k"), changed_keys)))
        con = engine.cursor()
        try:
            con.register("alone", alone)
            con.register("asked", groups)
            picks = ", ".join(f"{a.fn}(b.{a.arg}) AS {a.name}" for a in shape.extremes)
            same = " AND ".join(f"a.{c} IS NOT DISTINCT FROM b.{c}" for c in shape.groups) or "true"
            passes = f" WHERE ({shape.filter_sql}) IS TRUE" if shape.filter_sql else ""
            g = "".join(f"a.{c}, " for c in shape.groups)
            return con.sql(f"SELECT {g}{picks} FROM asked a LEFT JOIN (SELECT * FROM alone{passes}) b ON {same}"
                           f"{' GROUP BY ALL' if shape.groups else ''}").to_arrow_table()
        finally:
            con.close()
    return read


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_view_kept_from_checkpoint_reports_equals_the_replica_at_every_seq(data):
    root = Path(tempfile.mkdtemp(prefix="htap-view-"))
    keyindex.forget()  # (an earlier example's, in folders gone)
    try:
        filtered = data.draw(st.booleans(), label="filtered")
        where = " WHERE f > 0" if filtered else ""
        shape = ViewShape.of(parse_view(f"SELECT g, count(*), count(x), sum(x), min(x), max(x) FROM s.t{where} GROUP BY g",
                                        {"s.t": SCHEMA}), ["k"])
        table = DirectTable(root, SCHEMA, ["k"], data.draw(st.sampled_from([None, [3], [2, 5]]), label="splits"))
        view = ViewVersions(shape)
        state: dict[int, list] = {}
        keys = st.integers(0, 7)
        small = st.none() | st.integers(0, 2)
        previous = seq = 0
        for _ in range(data.draw(st.integers(1, 5), label="checkpoints")):
            for _ in range(data.draw(st.integers(1, 4), label="transactions")):
                seq += 1
                for _ in range(data.draw(st.integers(1, 4))):
                    op = data.draw(st.sampled_from(["upsert", "upsert", "partial", "move", "delete", "truncate"]))
                    k = data.draw(keys)
                    if op == "upsert":
                        row = [k, data.draw(small), data.draw(st.none() | st.integers(-4, 4)), data.draw(small)]
                        apply_change(table, state, op, k, row, seq)
                    elif op == "partial" and k in state:  # unchanged TOAST: some columns unset
                        sent = [k] + [data.draw(st.sampled_from([UNSET, UNSET, 1, None])) for _ in range(3)]
                        apply_change(table, state, op, k, sent, seq)
                    elif op == "move" and k in state and len(state) < 8:
                        to = data.draw(st.sampled_from([x for x in range(8) if x not in state]), label="new key")
                        apply_change(table, state, op, k, [to] + [data.draw(st.sampled_from([UNSET, 2])) for _ in range(3)],
                                     seq)
                    elif (op == "delete" and k in state) or op == "truncate":
                        apply_change(table, state, op, k, None, seq)
            cuts = [s for _, s in table.truncations]
            changed: list = []
            table.checkpoint(seq, changed)
            floor = table.store.truncated_at(table.table.id, previous)
            versions, before = checkpoint_changes(changed, SCHEMA, floor)
            for c in changed:  # each key's version as of the last checkpoint
                assert all(s <= previous for s in c.before.column(SEQ).to_pylist())
            out = group_changes(shape, previous, before, versions, view.states_table(previous), cuts,
                                _extremes(shape, table.read(previous), versions.column("k")))
            view.add(out, cuts)
            for s in range(previous + 1, seq + 1):
                assert {g: _ints(v) for g, v in view.at(s).items()} == _expected(shape, table.read(s)), s
            assert _expected(shape, table.read(seq)) == _expected(shape, pa.Table.from_pylist(
                [dict(zip(COLUMNS, r)) for r in state.values()], schema=SCHEMA))
            previous = seq
    finally:
        shutil.rmtree(root, ignore_errors=True)


DIM = pa.schema([("id", pa.int64()), ("g", pa.int64()), ("f", pa.int64())])


def _joined(fact: pa.Table, dim: pa.Table) -> pa.Table:
    """The join view's rows: each fact row with the dimension row of its key (`e__<column>`)."""
    con = engine.cursor()
    try:
        con.register("t", fact)
        con.register("e", dim)
        return con.sql("SELECT t.*, e.g AS e__g, e.f AS e__f FROM t JOIN e ON t.g = e.id").to_arrow_table()
    finally:
        con.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_join_view_kept_from_both_tables_reports_equals_the_join_at_every_seq(data):
    """A view of a table joined with a dimension by its key (htap.replica.view_bases): random
    transactions change either table — dimension rows re-keyed, deleted, truncated, changed so
    that every row joined to them changes group — and the view, advanced checkpoint by checkpoint
    from the two tables' reports, equals the aggregate of the join of the replicas at every seq."""
    from htap.replica.view_bases import ViewBase
    from htap.replica.warehouse import open_warehouse_at

    root = Path(tempfile.mkdtemp(prefix="htap-join-view-"))
    keyindex.forget()
    try:
        fact = DirectTable(root, SCHEMA, ["k"], data.draw(st.sampled_from([None, [3]]), label="splits"))
        dim = DirectTable(root, DIM, ["id"], None, metadata=root / "metadata.db")
        tables = {fact.table.qualified_name: SCHEMA, dim.table.qualified_name: DIM}
        where = " WHERE e.f > 0" if data.draw(st.booleans(), label="filtered") else ""
        definition = parse_view(f"SELECT e.g, count(*), count(x), sum(x), min(x), max(x)"
                                f" FROM {fact.table.qualified_name} t JOIN {dim.table.qualified_name} e ON t.g = e.id"
                                f"{where} GROUP BY e.g", tables, {dim.table.qualified_name: ("id",)})
        shape = ViewShape.of(definition, ["k"])
        warehouse = open_warehouse_at(str(fact.warehouse), None)
        view = ViewVersions(shape)
        states = {"fact": {}, "dim": {}}
        small = st.none() | st.integers(0, 3)
        previous = seq = 0
        for _ in range(data.draw(st.integers(1, 4), label="checkpoints")):
            for _ in range(data.draw(st.integers(1, 4), label="transactions")):
                seq += 1
                for _ in range(data.draw(st.integers(1, 4))):
                    which = data.draw(st.sampled_from(["fact", "fact", "dim"]))
                    table, state = (fact, states["fact"]) if which == "fact" else (dim, states["dim"])
                    op = data.draw(st.sampled_from(["upsert", "upsert", "move", "delete", "truncate"]))
                    k = data.draw(st.integers(0, 4 if which == "dim" else 7))
                    if op == "upsert":
                        row = [k, data.draw(small), data.draw(st.none() | st.integers(-4, 4)), data.draw(small)][:len(
                            table.table.arrow_schema)]
                        apply_change(table, state, op, k, row, seq)
                    elif op == "move" and k in state and len(state) < 5:
                        to = data.draw(st.sampled_from([x for x in range(5) if x not in state]), label="new key")
                        width = len(table.table.arrow_schema)
                        apply_change(table, state, op, k, [to] + [UNSET] * (width - 1), seq)
                    elif (op == "delete" and k in state) or (op == "truncate" and data.draw(st.booleans())):
                        apply_change(table, state, op, k, None, seq)
            cuts = {fact.table.id: [s for _, s in fact.truncations], dim.table.id: [s for _, s in dim.truncations]}
            changed_fact: list = []
            changed_dim: list = []
            fact.checkpoint(seq, changed_fact)
            dim.checkpoint(seq, changed_dim)
            store = fact.store
            base = ViewBase(store.table_by_id(fact.table.id),
                            ((definition.dimensions[0], store.table_by_id(dim.table.id)),))
            before, versions, ended = base.checkpoint(warehouse, store, shape, previous,
                                                      {fact.table.id: changed_fact, dim.table.id: changed_dim}, cuts,
                                                      "test")
            at_p = _joined(fact.read(previous), dim.read(previous))
            keys = versions.column("k") if versions.num_rows else pa.array([], pa.int64())
            out = group_changes(shape, previous, before, versions, view.states_table(previous), ended,
                                _extremes(shape, at_p, keys))
            view.add(out, ended)
            for s in range(previous + 1, seq + 1):
                expected = _expected(shape, _joined(fact.read(s), dim.read(s)))
                assert {g: _ints(v) for g, v in view.at(s).items()} == expected, s
            previous = seq
    finally:
        shutil.rmtree(root, ignore_errors=True)
