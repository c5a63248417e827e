"""replica/merge.py and pushdown/replica_reader.py: merge-on-read SQL over in-memory Arrow deltas
(registered in DuckDB as the source relation) against pure-Python models:

- the version model: per key, the newest version with floor <= _seq <= S; a delete hides the
  row; a column whose _unset bit is set comes from the key's newest older visible version that
  carried it (a delete carries NULLs);
- the source model: the state a sequence of transactions (upserts, partial updates, deletes,
  truncates) leaves at seq S, which reads at S must reproduce.
"""

from __future__ import annotations

import decimal
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import HEAVY_PROPERTY, agg, cmp, col, in_, is_null, matches, not_, one_scan, op, or_, sortable, value

from htap import engine
from htap.errors import DamagedReplicaError, InternalQueryError, QueryValueError, ReplicaError
from htap.pushdown.replica_reader import (
    JoinedTableRead,
    key_conjuncts,
    read_joined,
    read_replica,
    replica_sql,
    scanned_columns,
)
from htap.replica.merge import evolved, latest_versions_sql, parquet_source, versioned_source
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ, UNSET_MASK, delta_schema
from htap.replica.read_plans import ReadPlan
from htap.rewrite import render
from htap.rewrite.dialects import BREAK_PUSHDOWN_ENV, REPLICA
from htap.rewrite.pushed import Node, PushedPlan, Scan, SortKey

KEY = ["k"]
COLUMNS = ["k", "a", "b", "c"]
SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
DELTA = delta_schema(SCHEMA)
BIT = {c: 1 << i for i, c in enumerate(COLUMNS)}


def version(k, a=None, b=None, c=None, *, seq, op=OP_UPSERT, unset=0) -> dict:
    return {"k": k, "a": a, "b": b, "c": c, SEQ: seq, OP: op, UNSET_MASK: unset}


def as_delta(versions: list[dict]) -> pa.Table:
    """A delta as written: sorted by key ASC, seq DESC."""
    return pa.Table.from_pylist(sorted(versions, key=lambda v: (v["k"], -v[SEQ])), schema=DELTA)


# --- the version model --------------------------------------------------------------------------


def model_rows(versions: list[dict], seq: int, floor: int | None) -> list[dict]:
    """Current rows at `seq` by the version model (see the module docstring)."""
    by_key: dict[int, list[dict]] = {}
    for v in versions:
        if v[SEQ] <= seq and (floor is None or v[SEQ] >= floor):
            by_key.setdefault(v["k"], []).append(v)
    out = []
    for k, vs in by_key.items():
        vs.sort(key=lambda v: -v[SEQ])
        if vs[0][OP] == OP_DELETE:
            continue
        row = {"k": k}
        for c in COLUMNS[1:]:
            carrier = next((v for v in vs if not v[UNSET_MASK] & BIT[c]), None)
            row[c] = None if carrier is None else carrier[c]
        out.append(row)
    return out


def apply_plan(rows: list[dict], plan: PushedPlan) -> list[tuple]:
    """A one-scan pushed plan (the scan's rows, or an aggregate of them) over model rows, in Python."""
    scan = plan.scans[0]
    rows = [r for r in rows if matches(scan.filter, r)]
    if plan.root.op == "scan":
        return sortable([tuple(r[c] for c in scan.columns) for r in rows])
    node = plan.root
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[g.name] for g in node.group_by), []).append(r)
    if not node.group_by:
        groups.setdefault((), [])
    out = []
    for rs in groups.values():
        values = []
        for _name, e in node.exprs:
            if e.form == "col":  # a grouping column
                values.append(rs[0][e.name])
                continue
            xs = [r[e.args[0].name] for r in rs if e.args and r[e.args[0].name] is not None]
            values.append({
                "count_star": lambda: len(rs), "count": lambda: len(xs), "sum": lambda: sum(xs) if xs else None,
                "min": lambda: min(xs) if xs else None, "max": lambda: max(xs) if xs else None,
            }[e.name]())
        out.append(tuple(values))
    return sortable(out)


def run(source, seq, sp, *, floor=None, partial=False, strategy="merge", con=None, seq_filter=True, deletes=True) -> list[tuple]:
    sql = replica_sql(source, KEY, COLUMNS, seq, sp, floor=floor, partial=partial, strategy=strategy,
                      seq_filter=seq_filter, deletes=deletes)
    return sortable(con.sql(sql).fetchall())


def needed_filters(versions: list[dict], seq: int, floor: int | None) -> dict[str, bool]:
    """What htap.replica.read_plans.plan_reads tells a read of deltas holding `versions`: whether a
    version lies outside [floor, seq], whether one is a delete."""
    return {"seq_filter": any(v[SEQ] > seq or (floor is not None and v[SEQ] < floor) for v in versions),
            "deletes": any(v[OP] == OP_DELETE for v in versions)}


@pytest.fixture(scope="module")
def con():
    c = engine.cursor()
    yield c
    c.close()


# --- strategies ---------------------------------------------------------------------------------

KEYS = st.integers(0, 7)
A = st.none() | st.integers(-3, 3)
B = st.none() | st.sampled_from(["x", "y", "", "x%"])
C = st.none() | st.sampled_from([0.5, -1.0, 2.25])


@st.composite
def version_sets(draw, partial=True, max_seq=12, keys=KEYS):
    """Arbitrary stored versions: at most one per (key, seq), deletes and partial updates anywhere;
    unset columns hold garbage the merge must ignore."""
    out = []
    for k in draw(st.lists(keys, unique=True, max_size=6)):
        for seq in draw(st.lists(st.integers(1, max_seq), unique=True, min_size=1, max_size=4)):
            if draw(st.integers(0, 4)) == 0:
                out.append(version(k, seq=seq, op=OP_DELETE))
                continue
            mask = draw(st.sampled_from([0, 0, BIT["a"], BIT["b"] | BIT["c"], BIT["a"] | BIT["b"] | BIT["c"]])) if partial else 0
            out.append(version(k, draw(A), draw(B), draw(C), seq=seq, unset=mask))
    return out


TYPES = {"k": "bigint", "a": "bigint", "b": "string", "c": "double"}


def every_column() -> PushedPlan:
    return one_scan(COLUMNS)


@st.composite
def plans(draw):
    kind = draw(st.sampled_from(["all", "columns", "key filter", "row filter", "both filters", "aggregate"]))
    key_filters = st.sampled_from([
        cmp("eq", "k", "long", 3), cmp("ge", "k", "long", 4), cmp("lt", "k", "long", 2),
        in_("k", ("long", 1), ("long", 5), ("null", None)), not_(cmp("eq", "k", "long", 0)),
        op("<", value("long", 5), col("k", "bigint")),  # the literal first
        or_(cmp("lt", "k", "long", 2), cmp("gt", "k", "long", 4)),  # an OR, ANDed with the seq bounds (fuzz seed 23)
    ])
    row_filters = st.sampled_from([
        cmp("gt", "a", "long", 0), is_null("b"), cmp("eq", "b", "string", "x"), cmp("starts_with", "b", "string", "x%"),
        or_(cmp("lt", "c", "double", 0.0), is_null("a")), not_(cmp("eq_null_safe", "c", "double", 0.5)),
        or_(cmp("eq", "k", "long", 1), cmp("eq", "a", "long", 1)),  # mixes key and value columns
    ])
    columns = st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4, unique=True).map(tuple)
    if kind == "all":
        return every_column()
    if kind == "columns":
        return one_scan(draw(columns))
    if kind == "key filter":
        return one_scan(draw(columns), (draw(key_filters),))
    if kind == "row filter":
        return one_scan(draw(columns), (draw(row_filters),))
    if kind == "both filters":
        return one_scan(COLUMNS, (draw(key_filters), draw(row_filters)))
    group_by = draw(st.sampled_from([(), ("b",), ("a", "b")]))
    aggregates = [("n", agg("count_star")), ("nb", agg("count", col("b", "string"))),
                  ("sa", agg("sum", col("a", "bigint"))), ("mc", agg("max", col("c", "double"), type_="double")),
                  ("mk", agg("min", col("k", "bigint")))]
    return one_scan(COLUMNS, draw(st.lists(row_filters | key_filters, max_size=1)),
                    aggregate=[(g, col(g, TYPES[g])) for g in group_by] + aggregates,
                    group_by=[col(g, TYPES[g]) for g in group_by])


# --- properties ---------------------------------------------------------------------------------


@HEAVY_PROPERTY
@given(version_sets(), st.integers(0, 13), st.none() | st.integers(1, 12), plans())
def test_merge_matches_the_version_model(con, versions, seq, floor, sp):
    con.register("deltas", as_delta(versions))
    expected = apply_plan(model_rows(versions, seq, floor), sp)
    assert run("deltas", seq, sp, floor=floor, partial=True, con=con) == expected
    # without the filters that cannot drop a row of these versions
    assert run("deltas", seq, sp, floor=floor, partial=True, con=con, **needed_filters(versions, seq, floor)) == expected
    if not any(v[UNSET_MASK] for v in versions):  # the cheaper merge is enough without partial rows
        assert run("deltas", seq, sp, floor=floor, partial=False, con=con) == expected


@st.composite
def base_and_newer(draw):
    """A base delta (one version per key, no partial rows, as a base compaction leaves it) and
    newer deltas whose versions are all above the base's seqs."""
    base = []
    for k in draw(st.lists(KEYS, unique=True, max_size=7)):
        seq = draw(st.integers(1, 5))
        if draw(st.integers(0, 5)) == 0:
            base.append(version(k, seq=seq, op=OP_DELETE))
        else:
            base.append(version(k, draw(A), draw(B), draw(C), seq=seq))
    # newer versions mostly of keys the base holds: the base's version must then lose
    keys = st.one_of(st.sampled_from([v["k"] for v in base]), KEYS) if base else KEYS
    newer = [draw(version_sets(partial=False, max_seq=6, keys=keys)) for _ in range(draw(st.integers(0, 3)))]
    newer = [[{**v, SEQ: v[SEQ] + 5} for v in vs] for vs in newer]  # seqs 6..11, all above the base
    # one version per (key, seq) across deltas, as the store guarantees
    seen, unique_newer = set(), []
    for vs in newer:
        vs = [v for v in vs if (v["k"], v[SEQ]) not in seen]
        seen |= {(v["k"], v[SEQ]) for v in vs}
        unique_newer.append(vs)
    return base, unique_newer


@pytest.fixture(scope="module")
def scratch():
    d = Path(tempfile.mkdtemp(prefix="htap-unit-merge-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write(folder: Path, name: str, versions: list[dict]) -> str:
    path = folder / f"{name}.parquet"
    pq.write_table(as_delta(versions), path)
    return str(path)


_example = iter(range(1 << 30))


@HEAVY_PROPERTY
@given(base_and_newer(), st.integers(0, 12), st.none() | st.integers(1, 8), plans())
def test_direct_and_base_strategies_match_the_version_model(con, scratch, deltas, seq, floor, sp):
    base, newer = deltas
    folder = scratch / str(next(_example))
    folder.mkdir()
    files = [write(folder, "base", base)] + [write(folder, f"n{i}", vs) for i, vs in enumerate(newer)]
    everything = base + [v for vs in newer for v in vs]
    expected = apply_plan(model_rows(everything, seq, floor), sp)
    assert run(files, seq, sp, floor=floor, strategy="merge", con=con) == expected
    needed = needed_filters(everything, seq, floor)
    if newer:
        assert run(files, seq, sp, floor=floor, strategy="base", con=con) == expected
        assert run(files, seq, sp, floor=floor, strategy="base", con=con, **needed) == expected
    else:
        assert run(files, seq, sp, floor=floor, strategy="direct", con=con) == expected
        assert run(files, seq, sp, floor=floor, strategy="direct", con=con, **needed) == expected
        con.register("one", as_delta(base))
        assert run("one", seq, sp, floor=floor, strategy="direct", con=con) == expected


# --- the source model: reads reproduce the history of transactions --------------------------------


@st.composite
def histories(draw):
    """Transactions at seqs 1..n over keys 0..7 as a source commits them, and the versions the
    replica stores for them (partial updates unfilled, as when their base is in an older delta)."""
    state: dict[int, dict] = {}
    states = {0: {}}
    versions, truncations = [], []
    for seq in range(1, draw(st.integers(1, 10)) + 1):
        if draw(st.integers(0, 7)) == 0:
            state.clear()
            truncations.append(seq)
        for k in draw(st.lists(KEYS, unique=True, max_size=4)):
            op = draw(st.sampled_from(["upsert", "upsert", "partial", "delete"]))
            if op == "upsert" or (op == "partial" and k not in state):
                row = {"k": k, "a": draw(A), "b": draw(B), "c": draw(C)}
                state[k] = row
                versions.append(version(**row, seq=seq))
            elif op == "partial":
                sent = {c: draw(st.booleans()) for c in COLUMNS[1:]}
                new = {c: draw({"a": A, "b": B, "c": C}[c]) for c in COLUMNS[1:]}
                mask = sum(BIT[c] for c, s in sent.items() if not s)
                versions.append(version(k, **{c: new[c] if sent[c] else None for c in new}, seq=seq, unset=mask))
                state[k] = {**state[k], **{c: new[c] for c in new if sent[c]}}
            elif k in state:
                versions.append(version(k, seq=seq, op=OP_DELETE))
                del state[k]
        states[seq] = {k: dict(v) for k, v in state.items()}
    return versions, truncations, states


@HEAVY_PROPERTY
@given(histories(), st.data())
def test_reads_at_a_seq_reproduce_the_sources_state(con, history, data):
    versions, truncations, states = history
    con.register("deltas", as_delta(versions))
    for seq in data.draw(st.lists(st.sampled_from(sorted(states)), min_size=1, max_size=3, unique=True), label="read seqs"):
        floor = max((t for t in truncations if t <= seq), default=None)  # as MetadataStore.truncated_at
        got = run("deltas", seq, every_column(), floor=floor, partial=True, con=con)
        assert got == sortable([tuple(r[c] for c in COLUMNS) for r in states[seq].values()]), f"at seq {seq}"


# --- named cases ---------------------------------------------------------------------------------


def test_named_cases(con):
    versions = [
        version(1, 10, "a", 1.0, seq=1),
        version(1, None, None, None, seq=2, unset=BIT["a"] | BIT["c"]),  # b set to NULL; a, c unchanged
        version(1, 99, "garbage", 9.0, seq=3, unset=BIT["b"] | BIT["c"]),  # a = 99; masked values ignored
        version(2, 20, "b", None, seq=1),
        version(2, seq=2, op=OP_DELETE),
        version(3, 30, "c", None, seq=2),
        version(3, seq=4, op=OP_DELETE),
        version(3, None, None, None, seq=5, unset=BIT["a"]),  # after a delete the unset column is NULL
    ]
    con.register("deltas", as_delta(versions))
    read = lambda seq, **kw: run("deltas", seq, every_column(), partial=True, con=con, **kw)  # noqa: E731
    assert read(0) == []
    assert read(1) == [(1, 10, "a", 1.0), (2, 20, "b", None)]
    assert read(2) == [(1, 10, None, 1.0), (3, 30, "c", None)]
    assert read(3) == [(1, 99, None, 1.0), (3, 30, "c", None)]
    assert read(4) == [(1, 99, None, 1.0)]
    assert read(5) == [(1, 99, None, 1.0), (3, None, None, None)]
    assert read(3, floor=2) == [(1, 99, None, None), (3, 30, "c", None)]  # truncated at 2: seq 1 is gone
    assert read(3, floor=3) == [(1, 99, None, None)]


def test_key_filters_are_applied_before_the_collapse():
    key_eq, value_gt = cmp("eq", "k", "long", 3), cmp("gt", "a", "long", 1)
    flipped = op(">", value("long", 9), col("k", "bigint"))  # 9 > k: on the key too
    mixed = or_(cmp("eq", "k", "long", 1), cmp("eq", "a", "long", 1))
    sp = one_scan(["b"], (key_eq, value_gt, flipped, mixed))
    assert key_conjuncts(sp.scans[0], KEY) == ([key_eq, flipped], [value_gt, mixed])
    sql = replica_sql("deltas", KEY, COLUMNS, 9, sp)
    inner, outer = sql.split("QUALIFY")
    text = {c: render.expr(c).sql(REPLICA) for c in (key_eq, value_gt, flipped, mixed)}
    assert text[key_eq] in inner and text[flipped] in inner
    assert text[value_gt] in outer and text[value_gt] not in inner and text[mixed] not in inner


def test_an_or_over_the_key_keeps_the_seq_bound(con):
    # `k < 2 OR k > 4` ANDed unparenthesized with `_seq <= 3` let key 5's newer version through.
    con.register("deltas", as_delta([version(5, 1, "old", 1.0, seq=1), version(5, 2, "new", 2.0, seq=5)]))
    sp = one_scan(COLUMNS, (or_(cmp("lt", "k", "long", 2), cmp("gt", "k", "long", 4)),))
    assert run("deltas", 3, sp, con=con) == [(5, 1, "old", 1.0)]


def test_only_referenced_and_key_columns_are_read():
    sql = replica_sql("deltas", KEY, COLUMNS, 9, one_scan(["b"]))
    assert '"a"' not in sql and '"c"' not in sql and '"k"' in sql
    filtered = Scan("public.t", ("b",), (cmp("gt", "c", "double", 0.5),))
    assert scanned_columns(COLUMNS, KEY, filtered, "merge") == ["k", "b", "c"]  # filter columns too
    assert scanned_columns(COLUMNS, KEY, filtered, "direct") == ["b", "c"]  # one version per key: no merge key
    assert scanned_columns(COLUMNS, KEY, Scan("public.t", ()), "direct") == ["k"]  # no column: one all the same


def test_the_break_pushdown_test_switch(con, monkeypatch):
    con.register("deltas", as_delta([version(k, k, seq=1) for k in range(5)]))
    sp = one_scan(["k"], (cmp("lt", "a", "long", 2),))
    monkeypatch.delenv(BREAK_PUSHDOWN_ENV, raising=False)
    assert run("deltas", 1, sp, con=con) == [(0,), (1,)]
    monkeypatch.setenv(BREAK_PUSHDOWN_ENV, "1")
    assert run("deltas", 1, sp, con=con) == [(0,), (1,), (2,)]  # `<` read as `<=`: what verify must catch


def test_composite_keys(con):
    schema = pa.schema([("r", pa.string()), ("id", pa.int64()), ("v", pa.int64())])
    rows = [
        {"r": "eu", "id": 1, "v": 1, SEQ: 1, OP: 0, UNSET_MASK: 0},
        {"r": "us", "id": 1, "v": 2, SEQ: 1, OP: 0, UNSET_MASK: 0},
        {"r": "eu", "id": 1, "v": None, SEQ: 2, OP: 0, UNSET_MASK: 0b100},
        {"r": "us", "id": 1, "v": None, SEQ: 3, OP: 1, UNSET_MASK: 0},
    ]
    con.register("ck", pa.Table.from_pylist(rows, schema=delta_schema(schema)))
    sql = replica_sql("ck", ["id", "r"], ["r", "id", "v"], 3, one_scan(["r", "id", "v"]), partial=True)
    assert con.sql(sql).fetchall() == [("eu", 1, 1)]


def test_latest_versions_sql_keeps_seq_and_op():
    sql = latest_versions_sql("deltas", KEY, COLUMNS, ["k", "a"], 7, floor=2)
    assert sql.startswith('SELECT "k", "a", "_seq", "_op" FROM deltas WHERE "_seq" <= 7 AND "_seq" >= 2 QUALIFY')


# --- schema versions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "versions,added,expected",
    [(None, None, False), ([], {"w": 2}, False), ([1, 1], None, False), ([1, 2], None, True), ([2, 2], {"w": 2}, False),
     ([1, 1], {"w": 2}, True), ([3], {"w": 2}, False)],
)
def test_evolved(versions, added, expected):
    assert evolved(versions, added) is expected


def test_versioned_source_reads_old_deltas_under_the_new_schema(con, tmp_path):
    old = pa.Table.from_pylist([version(1, 1, "x", 1.0, seq=1)], schema=DELTA).drop_columns(["c"])  # before c existed
    new = pa.Table.from_pylist([version(2, 2, "y", 2.0, seq=2)], schema=DELTA)
    pq.write_table(old, tmp_path / "old.parquet")
    pq.write_table(new, tmp_path / "new.parquet")
    source = versioned_source([str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet")], [1, 2], {"c": 2}, COLUMNS)
    assert run(source, 9, every_column(), con=con) == [(1, 1, "x", None), (2, 2, "y", 2.0)]


def test_parquet_source_quotes_paths():
    assert parquet_source(["/a/b.parquet", "/it's/c.parquet"]) == "read_parquet(['/a/b.parquet', '/it''s/c.parquet'])"


# --- read_replica ---------------------------------------------------------------------------------


def test_read_replica_streams_cast_batches(tmp_path):
    pq.write_table(as_delta([version(1, 5, "x", 0.5, seq=1), version(2, 6, None, None, seq=1)]), tmp_path / "d.parquet")
    out = pa.schema([("total", pa.decimal128(20, 0)), ("n", pa.int64())])
    sp = one_scan(["a"], aggregate=[("total", agg("sum", col("a", "bigint"))), ("n", agg("count_star"))])
    batches = list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 1, sp, out))
    assert pa.Table.from_batches(batches).to_pylist() == [{"total": decimal.Decimal(11), "n": 2}]


def test_read_replica_without_deltas_is_empty(tmp_path):
    assert pa.Table.from_batches(list(read_replica(tmp_path, "public.t", SCHEMA, KEY, [], 5, every_column(), SCHEMA)),
                                 schema=SCHEMA).num_rows == 0


def test_read_replica_names_a_missing_delta(tmp_path):
    with pytest.raises(DamagedReplicaError, match=r"^damaged replica: delta file .*gone.parquet is missing \(table public.t\)"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["gone.parquet"], 5, every_column(), SCHEMA))


def test_read_replica_names_a_corrupt_delta(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(DamagedReplicaError, match=r"^damaged replica: delta file .*bad.parquet is corrupt"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["bad.parquet"], 5, every_column(), SCHEMA))


def test_a_corrupt_page_behind_an_intact_footer_is_damage(tmp_path):
    rows = [version(k, k * 7919, f"x{k}" * 5, k / 7, seq=1) for k in range(20000)]
    pq.write_table(as_delta(rows), tmp_path / "d.parquet", compression="zstd")
    data = bytearray((tmp_path / "d.parquet").read_bytes())
    data[len(data) // 3: len(data) // 3 + 2000] = b"\xff" * 2000  # inside the data pages, footer untouched
    (tmp_path / "d.parquet").write_bytes(bytes(data))
    sp = one_scan(["a", "b"], aggregate=[("s", agg("sum", col("a", "bigint"))), ("n", agg("count", col("b", "string")))])
    out = pa.schema([("s", pa.decimal128(38, 0)), ("n", pa.int64())])
    with pytest.raises(DamagedReplicaError, match="d.parquet is corrupt"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, sp, out))


def test_our_own_failing_sql_over_intact_files_is_not_damage(tmp_path):
    # A pushed filter DuckDB cannot evaluate here ('x' is no integer): an error in our SQL, not
    # in the files, so it must not mark the table unhealthy (only DamagedReplicaError does).
    pq.write_table(as_delta([version(1, 5, "x", seq=1)]), tmp_path / "d.parquet")
    sp = one_scan(["k"], (cmp("eq", "a", "string", "x"),))
    with pytest.raises(InternalQueryError, match="failed on intact files") as e:
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, sp, pa.schema([("k", pa.int64())])))
    assert not isinstance(e.value, ReplicaError)


def test_pushed_arithmetic_that_overflows_on_the_data_is_the_query_s_error_not_a_bug(tmp_path):
    # Pushed integer arithmetic raises on overflow as Spark's ANSI mode does: the data's answer
    # (QueryValueError, named as Spark names it), neither damage nor "a spark-htap bug".
    pq.write_table(as_delta([version(1, 2**63 - 1, seq=1)]), tmp_path / "d.parquet")
    # a + a: DuckDB moves a constant term across the comparison and would not compute a + 1
    over = op(">", op("+", col("a", "bigint"), col("a", "bigint"), type_="bigint"), value("long", 0, "bigint"))
    sp = one_scan(["k"], (over,))
    with pytest.raises(QueryValueError, match=r"^\[ARITHMETIC_OVERFLOW\] .*Overflow in addition of INT64.*try_add"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, sp, pa.schema([("k", pa.int64())])))
    divide = op(">", op("DIV", col("c", "double"), op("-", col("c", "double"), col("c", "double"), type_="double"),
                        type_="double"), value("double", 0.0, "double"))
    pq.write_table(as_delta([version(1, c=1.5, seq=1)]), tmp_path / "d.parquet")
    with pytest.raises(QueryValueError, match=r"^\[DIVIDE_BY_ZERO\] "):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, one_scan(["k"], (divide,)),
                          pa.schema([("k", pa.int64())])))


def test_a_plan_that_reads_its_rows_twice_reads_the_current_rows_once(tmp_path):
    # ROLLUP's Expand renders one SELECT per grouping set over the same rows: a partition's read
    # (one task per partition of a split subtree) binds the current rows once, by name (it
    # failed with "4 places for its current rows": fuzz seed 34 queries 127, 149, 232).
    pq.write_table(as_delta([version(1, 5, seq=1), version(2, 7, seq=1), version(1, 6, seq=2), version(3, 9, seq=3)]),
                   tmp_path / "d.parquet")
    k, a = col("k", "bigint"), col("a", "bigint")
    expand = Node("expand", (Node("scan", scan=0, output=("k", "a")),), projections=(
        (k, a, value("long", 0, "bigint")), (k, value("null", None, "bigint"), value("long", 1, "bigint"))),
        output=("k", "a", "g"))
    plan = PushedPlan((Scan("public.t", ("k", "a")),), expand, split=0)
    out = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("g", pa.int64())])
    rows = [r for b in read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 2, plan, out) for r in b.to_pylist()]
    assert sorted(rows, key=repr) == sorted([
        {"k": 1, "a": 6, "g": 0}, {"k": 2, "a": 7, "g": 0}, {"k": 1, "a": None, "g": 1}, {"k": 2, "a": None, "g": 1}], key=repr)


def test_read_replica_refuses_a_result_of_the_wrong_width(tmp_path):
    pq.write_table(as_delta([version(1, seq=1)]), tmp_path / "d.parquet")
    with pytest.raises(InternalQueryError, match="replica query returned 4 columns, Spark expects 1"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, every_column(), pa.schema([("k", pa.int64())])))


def test_no_test_switch_is_left_on():
    assert os.environ.get(BREAK_PUSHDOWN_ENV) != "1"


def test_a_scan_that_needs_no_column_returns_rows_without_columns(tmp_path):
    # `SELECT 1 FROM t` or `count(*)` under a filter Spark keeps: Spark prunes every column and
    # wants the rows as zero-column batches. DuckDB has no zero-column SELECT: this used to be a
    # parser error reported as a damaged replica (and the table was marked unhealthy).
    pq.write_table(as_delta([version(k, k, seq=1) for k in range(5)] + [version(3, seq=2, op=OP_DELETE)]), tmp_path / "d.parquet")
    empty = pa.schema([])
    for sp in (one_scan([]), one_scan([], (cmp("gt", "a", "long", 0),))):
        batches = list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 2, sp, empty))
        assert all(b.num_columns == 0 and b.schema.equals(empty) for b in batches)
        assert sum(b.num_rows for b in batches) == (4 if not sp.scans[0].filter else 3)


# --- read_joined: several scans (or one table's partitions) in one DuckDB query ------------------


def joined_reads(tmp_path, first_parts=(0, 1)):
    """Two tables over local deltas at seq 2: t1 in two partitions (k 1, 2 | k 3 deleted, 4, 5),
    a = 10 k; t2 in one (k 1, 2, 4; a = k)."""
    pq.write_table(as_delta([version(1, 10, seq=1), version(2, 20, "x", seq=1)]), tmp_path / "t1p0.parquet")
    pq.write_table(as_delta([version(3, 30, seq=1), version(4, 40, seq=1), version(5, 50, seq=1),
                             version(3, seq=2, op=OP_DELETE)]), tmp_path / "t1p1.parquet")
    pq.write_table(as_delta([version(k, k, seq=1) for k in (1, 2, 4)]), tmp_path / "t2p0.parquet")
    t1 = [ReadPlan(p, 2, (f"t1p{p}.parquet",), None, False) for p in first_parts]
    t2 = [ReadPlan(0, 2, ("t2p0.parquet",), None, False)]
    return [JoinedTableRead("src.public.t1", SCHEMA, KEY, tuple(t1)), JoinedTableRead("src.public.t2", SCHEMA, KEY, tuple(t2))]


JOIN_COUNT = PushedPlan(
    (Scan("public.t1", ("k", "a"), (cmp("gt", "a", "long", 10),)), Scan("public.t2", ("k",))),
    Node("aggregate", (Node("join", (Node("scan", scan=0, output=("c1", "c2")), Node("scan", scan=1, output=("c3",))),
                            cond=op("=", col("c1", "bigint"), col("c3", "bigint")), join_type="inner"),),
         exprs=(("n", agg("count_star")), ("s", agg("sum", col("c2", "bigint"))))))
COUNT_SUM = pa.schema([("n", pa.int64()), ("s", pa.int64())])


def test_read_joined_joins_each_scans_current_rows_with_its_own_filter(tmp_path):
    # t1 at seq 2 with a > 10: k 2, 4, 5; joined with t2's k 1, 2, 4: k 2 and 4
    got = pa.Table.from_batches(list(read_joined(tmp_path, joined_reads(tmp_path), JOIN_COUNT, COUNT_SUM)), schema=COUNT_SUM)
    assert got.to_pylist() == [{"n": 2, "s": 60}]


def test_read_joined_over_a_table_with_every_partition_pruned_still_answers(tmp_path):
    # No partition of t1 left (its key filter pruned them all): an empty relation, the global aggregate's one row
    got = pa.Table.from_batches(list(read_joined(tmp_path, joined_reads(tmp_path, first_parts=()), JOIN_COUNT, COUNT_SUM)),
                                schema=COUNT_SUM)
    assert got.to_pylist() == [{"n": 0, "s": None}]
    rows_only = PushedPlan((Scan("public.t1", ()), Scan("public.t2", ("k",))), Node("aggregate", (Node("join", (
        Node("scan", scan=0, output=()), Node("scan", scan=1, output=("c3",))), join_type="cross"),),
        exprs=(("n", agg("count_star")),)))
    out = pa.schema([("n", pa.int64())])
    assert pa.Table.from_batches(list(read_joined(tmp_path, joined_reads(tmp_path, first_parts=()), rows_only, out)),
                                 schema=out).to_pylist() == [{"n": 0}]
    assert pa.Table.from_batches(list(read_joined(tmp_path, joined_reads(tmp_path), rows_only, out)),
                                 schema=out).to_pylist() == [{"n": 4 * 3}]


def test_read_joined_reads_one_tables_partitions_as_one_relation_and_a_self_join(tmp_path):
    reads = joined_reads(tmp_path)
    # a single table's scan in one task: its top-N final over both partitions
    top = PushedPlan((Scan("public.t1", ("k", "a")),), Node("limit", (Node("scan", scan=0, output=("c1", "c2")),),
                                                             keys=(SortKey(col("c2", "bigint"), False, False),), limit=2))
    out = pa.schema([("k", pa.int64()), ("a", pa.int64())])
    assert pa.Table.from_batches(list(read_joined(tmp_path, reads[:1], top, out)), schema=out).to_pylist() == [
        {"k": 5, "a": 50}, {"k": 4, "a": 40}]
    # t1 joined with itself (k = k + 1 on a's): each scan its own view of the same table
    self_join = PushedPlan((Scan("public.t1", ("k",)), Scan("public.t1", ("k", "a"), (cmp("lt", "a", "long", 50),))),
                           Node("join", (Node("scan", scan=0, output=("c1",)), Node("scan", scan=1, output=("c2", "c3"))),
                                cond=op("=", col("c1", "bigint"), op("+", col("c2", "bigint"), value("long", 1), type_="bigint")),
                                join_type="inner"))
    out = pa.schema([("k", pa.int64()), ("k2", pa.int64()), ("a", pa.int64())])
    got = pa.Table.from_batches(list(read_joined(tmp_path, [reads[0], reads[0]], self_join, out)), schema=out).to_pylist()
    assert sorted((r["k"], r["k2"]) for r in got) == [(2, 1), (5, 4)]
    with pytest.raises(InternalQueryError, match="1 table reads for a plan of 2 scans"):
        list(read_joined(tmp_path, reads[:1], self_join, out))
