"""ingest/applier.py TransactionApplier: pure bookkeeping of change events into table buffers."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from unit_support import make_table

from htap.connectors.changes import UNSET, Begin, Commit, Progress, Relation, RowBatch, RowChange, Truncate, python_values
from htap.errors import HtapError
from htap.ingest.applier import Failed, FollowSchema, Recopy, TransactionApplier
from htap.ingest.buffer import SchemaChanged
from htap.replica.models import OP, SEQ, UNSET_MASK

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
ORDERS = make_table(SCHEMA, id=1, name="orders", copy_seq=100)
ITEMS = make_table(SCHEMA, id=2, name="items", copy_seq=50)


def applier(position=10, tables=(ORDERS, ITEMS)) -> TransactionApplier:
    return TransactionApplier(list(tables), python_values, position)


def row(table="orders", op="upsert", values=(1, "a"), old=None) -> RowChange:
    return RowChange("public", table, op, list(values), None if old is None else list(old))


def txn(a: TransactionApplier, seq: int, *events, commit=True) -> list:
    """Apply Begin(seq), the events and Commit(seq); return the actions."""
    actions = [a.apply(Begin(seq, 1.0))]
    actions += [a.apply(e) for e in events]
    if commit:
        actions.append(a.apply(Commit(seq, 1.0)))
    return [x for x in actions if x is not None]


def versions(a: TransactionApplier, table_id: int) -> list[tuple]:
    b = a.buffers[table_id]
    return [(*vals, s, o, m) for *vals, s, o, m in zip(*b.columns, b.seqs, b.ops, b.unset)]


# --- what is applied and what is skipped ------------------------------------------------------


def test_a_transaction_above_the_position_and_the_copy_seq_is_buffered():
    a = applier()
    assert txn(a, 101, row(values=(1, "a")), row("items", values=(7, "x"))) == []
    assert versions(a, 1) == [(1, "a", 101, 0, 0)]
    assert versions(a, 2) == [(7, "x", 101, 0, 0)]
    assert a.buffered == 2 and a.pending()
    assert a.safe_seq == 101 and a.last_commit == 101 and not a.in_txn


def test_re_sent_transactions_at_or_below_the_position_are_skipped():
    a = applier(position=200)
    txn(a, 150, row())
    txn(a, 200, row())
    assert versions(a, 1) == [] and a.buffered == 0 and not a.pending()
    txn(a, 201, row())
    assert versions(a, 1) == [(1, "a", 201, 0, 0)]


def test_changes_a_tables_initial_copy_already_holds_are_skipped():
    a = applier()
    txn(a, 60, row("orders"), row("items"))  # orders copied at 100, items at 50
    assert versions(a, 1) == []
    assert versions(a, 2) == [(1, "a", 60, 0, 0)]
    txn(a, 100, row("orders"))
    assert versions(a, 1) == []
    txn(a, 101, row("orders"))
    assert [v[2] for v in versions(a, 1)] == [101]


def test_a_table_without_copy_seq_takes_every_new_transaction():
    a = applier(position=0, tables=[dataclasses.replace(ORDERS, copy_seq=None)])
    txn(a, 1, row())
    assert len(versions(a, 1)) == 1


def test_changes_of_tables_not_followed_are_ignored():
    a = applier()
    assert txn(a, 101, row("other"), RowChange("sales", "orders", "upsert", [1, "a"])) == []
    assert not a.pending() and a.buffered == 0


def test_deletes_keep_the_key():
    a = applier()
    txn(a, 101, row(op="delete", values=(1, None)))
    assert versions(a, 1) == [(1, None, 101, 1, 0)]


def test_a_key_change_deletes_the_old_key():
    a = applier()
    txn(a, 101, row(values=(2, "moved"), old=(1, None)))
    assert versions(a, 1) == [(1, None, 101, 1, 0), (2, "moved", 101, 0, 0)]
    assert a.buffered == 1  # one change


def test_an_old_row_with_the_same_key_is_no_key_change():
    a = applier()
    txn(a, 101, row(values=(1, "new"), old=(1, "old")))
    assert versions(a, 1) == [(1, "new", 101, 0, 0)]


def test_partial_updates_reach_the_buffer():
    a = applier()
    txn(a, 101, row(values=(1, "a")))
    txn(a, 102, row(values=(1, UNSET)))
    assert versions(a, 1)[1] == (1, "a", 102, 0, 0)


# --- truncate ---------------------------------------------------------------------------------


def test_truncate_empties_the_transactions_rows_and_is_recorded():
    a = applier()
    txn(a, 101, row(values=(1, "a")))
    txn(a, 102, row(values=(2, "b")), Truncate((("public", "orders"), ("public", "items"), ("public", "nope"))), row(values=(3, "c")))
    assert versions(a, 1) == [(1, "a", 101, 0, 0), (3, "c", 102, 0, 0)]
    assert a.truncations == [(1, 102), (2, 102)]
    assert a.pending()


def test_truncate_in_skipped_transactions_or_below_the_copy_seq_is_ignored():
    a = applier(position=60)
    txn(a, 55, Truncate((("public", "items"),)))  # a re-send
    txn(a, 80, Truncate((("public", "orders"), ("public", "items"))))  # orders' copy is newer
    assert a.truncations == [(2, 80)]


def test_a_truncation_alone_is_pending_work():
    a = applier()
    txn(a, 101, Truncate((("public", "orders"),)))
    assert a.pending() and a.buffered == 0


# --- schema ------------------------------------------------------------------------------------


def test_a_relation_with_other_columns_asks_to_follow_the_schema():
    a = applier()
    assert txn(a, 101, Relation("public", "orders", ("id", "v", "w"))) == [FollowSchema(1, ("id", "v", "w"))]


def test_a_relation_with_the_same_columns_needs_nothing():
    a = applier()
    assert txn(a, 101, Relation("public", "orders", ("id", "v"))) == []


def test_a_relation_in_a_re_sent_transaction_is_stale():
    a = applier(position=200)
    assert txn(a, 150, Relation("public", "orders", ("id",))) == []


def test_a_relation_in_a_transaction_below_the_tables_copy_seq_is_stale():
    a = applier()
    assert txn(a, 90, Relation("public", "orders", ("id",))) == []  # the copy at 100 has the newer schema
    assert txn(a, 90, Relation("public", "items", ("id",))) == [FollowSchema(2, ("id",))]


def test_a_relation_between_transactions_is_followed():
    a = applier()
    assert a.apply(Relation("public", "orders", ("id", "v", "w"))) == FollowSchema(1, ("id", "v", "w"))


def test_a_relation_of_a_table_not_followed_is_ignored():
    assert applier().apply(Relation("public", "zzz", ("a",))) is None


def test_a_change_with_another_column_count_asks_for_a_recopy():
    a = applier()
    [action] = txn(a, 101, row(values=(1, "a", "extra")))
    assert action == Recopy(1, "a change carried 3 columns, the replica has 2")
    assert versions(a, 1) == [] and a.buffered == 0


def test_a_change_the_buffer_refuses_fails_the_table():
    wide = pa.schema([("id", pa.int64())] + [(f"c{i}", pa.int32()) for i in range(1, 70)])
    a = applier(tables=[make_table(wide, id=3, name="wide", copy_seq=0)])
    values = [1] + [0] * 68 + [UNSET]  # column 69 cannot be unset
    [action] = txn(a, 101, row("wide", values=values))
    assert isinstance(action, Failed) and action.table_id == 3
    assert isinstance(action.error, SchemaChanged) and isinstance(action.error, HtapError)
    assert a.buffered == 0


# --- positions and progress ---------------------------------------------------------------------


def test_progress_between_transactions_moves_the_safe_seq():
    a = applier()
    a.apply(Progress(500))
    assert a.safe_seq == 500
    a.apply(Begin(600, 1.0))
    a.apply(Progress(700))  # inside a transaction: not every commit up to 700 is applied yet
    assert a.safe_seq == 500 and a.in_txn
    a.apply(Commit(600, 1.0))
    assert a.safe_seq == 600


def test_the_safe_seq_never_goes_back():
    a = applier(position=300)
    a.apply(Progress(200))
    txn(a, 250, row())
    assert a.safe_seq == 300


# --- the caller's side: drop, retable, drain, checkpointed --------------------------------------


def test_drop_forgets_a_table_and_its_buffered_changes():
    a = applier()
    txn(a, 101, row(), row("items"), Truncate((("public", "orders"), ("public", "items"))))
    a.drop(1)
    assert 1 not in a.buffers and 1 not in a.tables
    assert a.truncations == [(2, 101)]
    assert txn(a, 102, row(), Relation("public", "orders", ("x",))) == []
    a.drop(1)  # twice is harmless


def test_retable_applies_the_new_schema_to_later_changes():
    a = applier()
    txn(a, 101, row(values=(1, "a")))
    wider = make_table(SCHEMA.append(pa.field("w", pa.int32())), id=1, name="orders", copy_seq=100, schema_version=2, added={"w": 2})
    a.retable(wider)
    assert a.tables[1] is wider
    txn(a, 102, row(values=(2, "b", 5)))
    parts, _, _ = a.drain()
    assert [(t.schema_version, d.column_names[:3], d.num_rows) for t, d in parts] == [(1, ["id", "v", SEQ], 1), (2, ["id", "v", "w"], 1)]


def test_drain_returns_every_tables_rows_and_truncations_and_starts_afresh():
    a = applier()
    txn(a, 101, row(values=(1, "a")), row("items", values=(2, "b")))
    txn(a, 102, Truncate((("public", "items"),)))
    parts, truncations, failures = a.drain()
    assert {t.id: d.select(["id", SEQ, OP, UNSET_MASK]).to_pylist() for t, d in parts} == {
        1: [{"id": 1, SEQ: 101, OP: 0, UNSET_MASK: 0}],
        2: [{"id": 2, SEQ: 101, OP: 0, UNSET_MASK: 0}],
    }
    assert truncations == [(2, 102)]
    assert not a.pending() and a.buffered == 0 and a.drain() == ([], [], [])


def test_checkpointed_moves_the_position_and_refreshes_the_tables():
    a = applier()
    streaming_orders = dataclasses.replace(ORDERS, max_safe_seq=105)
    a.checkpointed(105, {1: streaming_orders, 99: make_table(id=99)})
    assert a.position == 105 and a.tables[1] is streaming_orders
    assert 99 not in a.tables  # only followed tables are refreshed
    txn(a, 105, row())  # now a re-send
    assert versions(a, 1) == []


@pytest.mark.parametrize("seq", [101, 10_000])
def test_skip_decisions_are_per_transaction(seq):
    a = applier(position=100)
    txn(a, 100, row())  # skipped
    txn(a, seq, row())  # applied
    assert [v[2] for v in versions(a, 1)] == [seq]


def test_a_relation_between_transactions_after_a_re_sent_one_is_followed():
    # Whether a transaction was a re-send says nothing about a Relation that comes after its commit
    # (MySQL DDL and Debezium schema change events arrive between transactions).
    a = applier(position=200)
    txn(a, 150, row())
    assert a.apply(Relation("public", "orders", ("id", "v", "w"))) == FollowSchema(1, ("id", "v", "w"))


# --- row batches ------------------------------------------------------------------------------


def batch(table="orders", op="upsert", columns=((1, 2), ("a", "b"))) -> RowBatch:
    return RowBatch("public", table, op, [list(c) for c in columns])


def test_a_row_batch_is_buffered_as_its_rows():
    a, b = applier(), applier()
    txn(a, 101, batch(columns=((1, 2, 1), ("a", "b", "c"))), batch(op="delete", columns=((2,), ("x",))))
    txn(b, 101, row(values=(1, "a")), row(values=(2, "b")), row(values=(1, "c")), row(op="delete", values=(2, "x")))
    assert a.buffered == b.buffered == 4
    (_, got), = a.drain()[0]
    (_, want), = b.drain()[0]
    assert got.equals(want)
    assert got.column(OP).to_pylist() == [0, 0, 0, 1] and got.column("v").to_pylist() == ["a", "b", "c", None]


def test_row_batches_follow_the_skip_rules_of_rows():
    a = applier(position=200)
    txn(a, 150, batch())  # a re-send
    txn(a, 201, batch("items"), batch("other"))
    assert len(a.buffers[1]) == 0 and a.buffered == 2
    assert a.buffers[2].seqs == [201, 201]
    b = applier()
    txn(b, 60, batch("orders"), batch("items"))  # orders copied at 100, items at 50
    assert len(b.buffers[1]) == 0 and len(b.buffers[2]) == 2


def test_a_row_batch_with_another_column_count_asks_for_a_recopy():
    a = applier()
    (action,) = txn(a, 101, batch(columns=((1,), ("a",), ("x",))), commit=False)
    assert action == Recopy(1, "a change carried 3 columns, the replica has 2")
