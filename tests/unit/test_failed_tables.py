"""Issue 11, pure parts: poison found by bisection, a failing table drained apart from the others,
failure messages, column type overrides, the SQL of each value's fate, config section removal."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import make_table

from htap.conf import parse_config, remove_source, render_config
from htap.connectors.changes import Begin, Commit, RowChange, decode_checked, find_poison, python_values
from htap.connectors.pgtypes import decode_text_column, replica_value_sql
from htap.connectors.tables import Column, apply_overrides, keep_overrides, override_type, parse_overrides
from htap.errors import ConfigError, PoisonError, TableError
from htap.seq import BINLOG, LSN
from htap.ingest.applier import TransactionApplier
from htap.ingest.failures import failure_message


def test_bisection_names_the_first_value_that_cannot_be_decoded():
    values = pa.array([str(i) for i in range(1000)] + ["x1", "7", "x2"])
    with pytest.raises(PoisonError) as e:
        decode_checked(decode_text_column, values, pa.int32(), "n")
    assert e.value.column == "n" and e.value.value == "x1" and e.value.row == 1000
    assert "'x1'" in str(e.value) and "int32" in str(e.value)


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=200), st.data())
def test_bisection_finds_the_first_poison_wherever_it_is(ints, data):
    values = [str(i) for i in ints]
    bad = sorted(data.draw(st.sets(st.integers(0, len(values) - 1), min_size=1, max_size=5)))
    for i in bad:
        values[i] = f"bad{i}"
    poison = find_poison(decode_text_column, pa.array(values), pa.int64(), "c", ValueError("x"))
    assert poison.row == bad[0] and poison.value == f"bad{bad[0]}"


def test_long_values_are_truncated_in_messages():
    e = PoisonError("doc", "y" * 1000, "too long")
    assert len(str(e)) < 300 and "(1002 characters)" in str(e)


SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int32())])
A = make_table(SCHEMA, id=1, name="a", copy_seq=0)
B = make_table(SCHEMA, id=2, name="b", copy_seq=0)


def decode(values, type):  # the Postgres way: text in, typed out
    return decode_text_column(pa.array(values, pa.string()), type)


def test_a_table_whose_values_cannot_be_decoded_fails_alone_with_its_seq():
    a = TransactionApplier([A, B], decode, 10)
    for seq, table, v in ((101, "a", "1"), (101, "b", "2"), (102, "a", "{{oops}}"), (103, "b", "3")):
        a.apply(Begin(seq, 1.0))
        a.apply(RowChange("public", table, "upsert", [str(seq), v]))
        a.apply(Commit(seq, 1.0))
    parts, truncations, failures = a.drain()
    assert [t.id for t, _ in parts] == [2] and parts[0][1].column("v").to_pylist() == [2, 3]
    (f,) = failures
    assert f.table.id == 1 and f.seq == 102 and f.error.column == "v" and f.error.value == "{{oops}}"
    assert 1 not in a.tables and 2 in a.tables  # no longer followed; the other one is
    assert a.drain() == ([], [], [])


def test_failure_messages_name_source_table_column_value_seq_and_the_way_out():
    msg = failure_message("shop", LSN, A, PoisonError("v", "{{1}}", "multi-dimensional array"), 0x16B3748,
                          "the change stream")
    assert msg.startswith("source shop, table public.a: the change stream at seq 0/16B3748: column v: value '{{1}}'")
    assert "htap tables recopy public.a --column-type v=<string" in msg and "reads go to the source" in msg
    msg = failure_message("m", BINLOG, A, TableError("gone"), (3 << 32) | 77, "the initial copy")
    assert "at seq binlog file #3 position 77: gone" in msg and "`htap tables recopy public.a`" in msg


def test_overrides():
    assert override_type("string") == pa.string() and override_type(" Double ") == pa.float64()
    assert override_type("decimal(38, 10)") == pa.decimal128(38, 10)
    for bad in ("decimal(39,2)", "decimal(5,6)", "int", ""):
        with pytest.raises(TableError, match="string .*double.*decimal"):
            override_type(bad)
    assert parse_overrides(["a=string", "b = decimal(10,2)"]) == {"a": "string", "b": "decimal(10,2)"}
    with pytest.raises(TableError, match="<column>=<type>"):
        parse_overrides(["a"])
    cols = [Column("a", "numeric", True), Column("b", "int", True)]
    chosen = apply_overrides(cols, {"a": "string"}, "t")
    assert [c.override for c in chosen] == ["string", None]
    with pytest.raises(TableError, match="has no column zz"):
        apply_overrides(cols, {"zz": "string"}, "t")
    # An override belongs to the source type it was chosen for.
    assert [c.override for c in keep_overrides(cols, chosen)] == ["string", None]
    changed = [Column("a", "numeric(20,2)", True), Column("b", "int", True)]
    assert [c.override for c in keep_overrides(changed, chosen)] == [None, None]


def test_the_sql_of_each_values_fate():
    assert replica_value_sql("n", "numeric(10,2)", pa.decimal128(10, 2)) == "NULLIF(\"n\", 'NaN')"
    assert "'9999-12-31'::date" in replica_value_sql("d", "date", pa.date32())
    assert "+00'::timestamptz" in replica_value_sql("t", "timestamp with time zone", pa.timestamp("us", tz="UTC"))
    assert replica_value_sql("x", "inet", pa.string(), "string") == 'CASE WHEN "x" IS NOT NULL THEN concat("x") END'
    assert replica_value_sql("x", "numeric", pa.float64(), "double") == '"x"::float8'
    assert replica_value_sql("i", "integer", pa.int32()) == '"i"'


def test_removing_a_source_section_keeps_the_rest_valid(tmp_path):
    path = tmp_path / "htap.toml"
    text = render_config("a", "host=x") + '\n[sources."b c"]\nkind = "postgres"\ndsn = "host=y"  # note\n'
    out = remove_source(text, "a", path)
    assert "[sources.a]" not in out and '[sources."b c"]' in out
    assert list(parse_config(__import__("tomllib").loads(out), path).sources) == ["b c"]
    assert "[sources" not in remove_source(out, "b c", Path(path)).split("[replica]")[1]
    with pytest.raises(ConfigError, match="no section"):
        remove_source(out, "zz", path)


def test_python_values_decode_checked_names_the_value():
    with pytest.raises(PoisonError) as e:
        decode_checked(python_values, (1, 2, "x"), pa.int64(), "c")
    assert e.value.row == 2 and e.value.value == "x"
