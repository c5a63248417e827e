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
from unit_support import HEAVY_PROPERTY, cmp, in_, is_null, matches, not_, or_, sortable

from htap import engine
from htap.errors import DamagedReplicaError, InternalQueryError, ReplicaError
from htap.pushdown.replica_reader import BREAK_PUSHDOWN_ENV, read_replica, replica_sql
from htap.replica.merge import evolved, latest_versions_sql, parquet_source, versioned_source
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ, UNSET_MASK, delta_schema
from htap.rewrite.subplan import Aggregate, PushedSubplan

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


def apply_subplan(rows: list[dict], sp: PushedSubplan) -> list[tuple]:
    """The pushed subplan over model rows, in Python."""
    rows = [r for r in rows if matches(sp.filters, r)]
    if not sp.aggregating:
        cols = sp.columns if sp.columns is not None else COLUMNS
        return sortable([tuple(r[c] for c in cols) for r in rows])
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c.name] for c in sp.group_by), []).append(r)
    if not sp.group_by:
        groups.setdefault((), [])
    out = []
    for g, rs in groups.items():
        values = []
        for a in sp.aggregates:
            col = [r[a.col] for r in rs if a.col and r[a.col] is not None]
            values.append({
                "count_star": lambda: len(rs), "count": lambda: len(col), "sum": lambda: sum(col) if col else None,
                "min": lambda: min(col) if col else None, "max": lambda: max(col) if col else None,
            }[a.fn]())
        out.append((*g, *values))
    return sortable(out)


def run(source, seq, sp, *, floor=None, partial=False, strategy="merge", con=None, seq_filter=True, deletes=True) -> list[tuple]:
    sql = replica_sql(source, KEY, COLUMNS, seq, sp, floor=floor, partial=partial, strategy=strategy,
                      seq_filter=seq_filter, deletes=deletes)
    return sortable(con.sql(sql).fetchall())


def needed_filters(versions: list[dict], seq: int, floor: int | None) -> dict[str, bool]:
    """What htap.replica.snapshot.plan_reads tells a read of deltas holding `versions`: whether a
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


@st.composite
def subplans(draw):
    kind = draw(st.sampled_from(["all", "columns", "key filter", "row filter", "both filters", "aggregate"]))
    key_filters = st.sampled_from([
        cmp("eq", "k", "long", 3), cmp("ge", "k", "long", 4), cmp("lt", "k", "long", 2),
        in_("k", ("long", 1), ("long", 5), ("null", None)), not_(cmp("eq", "k", "long", 0)),
    ])
    row_filters = st.sampled_from([
        cmp("gt", "a", "long", 0), is_null("b"), cmp("eq", "b", "string", "x"), cmp("starts_with", "b", "string", "x%"),
        or_(cmp("lt", "c", "double", 0.0), is_null("a")), not_(cmp("eq_null_safe", "c", "double", 0.5)),
        or_(cmp("eq", "k", "long", 1), cmp("eq", "a", "long", 1)),  # mixes key and value columns
    ])
    columns = st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4, unique=True).map(tuple)
    if kind == "all":
        return PushedSubplan()
    if kind == "columns":
        return PushedSubplan(columns=draw(columns))
    if kind == "key filter":
        return PushedSubplan(columns=draw(columns), filters=(draw(key_filters),))
    if kind == "row filter":
        return PushedSubplan(columns=draw(columns), filters=(draw(row_filters),))
    if kind == "both filters":
        return PushedSubplan(filters=(draw(key_filters), draw(row_filters)))
    group_by = draw(st.sampled_from([(), ("b",), ("a", "b")]))
    aggregates = (Aggregate("count_star"), Aggregate("count", "b"), Aggregate("sum", "a"), Aggregate("max", "c"), Aggregate("min", "k"))
    return PushedSubplan(filters=tuple(draw(st.lists(row_filters | key_filters, max_size=1))), group_by=group_by, aggregates=aggregates)


# --- properties ---------------------------------------------------------------------------------


@HEAVY_PROPERTY
@given(version_sets(), st.integers(0, 13), st.none() | st.integers(1, 12), subplans())
def test_merge_matches_the_version_model(con, versions, seq, floor, sp):
    con.register("deltas", as_delta(versions))
    expected = apply_subplan(model_rows(versions, seq, floor), sp)
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
@given(base_and_newer(), st.integers(0, 12), st.none() | st.integers(1, 8), subplans())
def test_direct_and_base_strategies_match_the_version_model(con, scratch, deltas, seq, floor, sp):
    base, newer = deltas
    folder = scratch / str(next(_example))
    folder.mkdir()
    files = [write(folder, "base", base)] + [write(folder, f"n{i}", vs) for i, vs in enumerate(newer)]
    everything = base + [v for vs in newer for v in vs]
    expected = apply_subplan(model_rows(everything, seq, floor), sp)
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
        got = run("deltas", seq, PushedSubplan(), floor=floor, partial=True, con=con)
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
    read = lambda seq, **kw: run("deltas", seq, PushedSubplan(), partial=True, con=con, **kw)  # noqa: E731
    assert read(0) == []
    assert read(1) == [(1, 10, "a", 1.0), (2, 20, "b", None)]
    assert read(2) == [(1, 10, None, 1.0), (3, 30, "c", None)]
    assert read(3) == [(1, 99, None, 1.0), (3, 30, "c", None)]
    assert read(4) == [(1, 99, None, 1.0)]
    assert read(5) == [(1, 99, None, 1.0), (3, None, None, None)]
    assert read(3, floor=2) == [(1, 99, None, None), (3, 30, "c", None)]  # truncated at 2: seq 1 is gone
    assert read(3, floor=3) == [(1, 99, None, None)]


def test_key_filters_are_applied_before_the_collapse():
    sp = PushedSubplan(columns=("b",), filters=(cmp("eq", "k", "long", 3), cmp("gt", "a", "long", 1)))
    sql = replica_sql("deltas", KEY, COLUMNS, 9, sp)
    inner, outer = sql.split("QUALIFY")
    assert '"k" = 3' in inner and '"a" > 1' in outer and '"a" > 1' not in inner


def test_only_referenced_and_key_columns_are_read():
    sql = replica_sql("deltas", KEY, COLUMNS, 9, PushedSubplan(columns=("b",)))
    assert '"a"' not in sql and '"c"' not in sql and '"k"' in sql


def test_the_break_pushdown_test_switch(con, monkeypatch):
    con.register("deltas", as_delta([version(k, k, seq=1) for k in range(5)]))
    sp = PushedSubplan(columns=("k",), filters=(cmp("lt", "a", "long", 2),))
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
    sql = replica_sql("ck", ["id", "r"], ["r", "id", "v"], 3, PushedSubplan(), partial=True)
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
    assert run(source, 9, PushedSubplan(), con=con) == [(1, 1, "x", None), (2, 2, "y", 2.0)]


def test_parquet_source_quotes_paths():
    assert parquet_source(["/a/b.parquet", "/it's/c.parquet"]) == "read_parquet(['/a/b.parquet', '/it''s/c.parquet'])"


# --- read_replica ---------------------------------------------------------------------------------


def test_read_replica_streams_cast_batches(tmp_path):
    pq.write_table(as_delta([version(1, 5, "x", 0.5, seq=1), version(2, 6, None, None, seq=1)]), tmp_path / "d.parquet")
    out = pa.schema([("total", pa.decimal128(20, 0)), ("n", pa.int64())])
    sp = PushedSubplan(aggregates=(Aggregate("sum", "a"), Aggregate("count_star")))
    batches = list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 1, sp, out))
    assert pa.Table.from_batches(batches).to_pylist() == [{"total": decimal.Decimal(11), "n": 2}]


def test_read_replica_without_deltas_is_empty(tmp_path):
    assert pa.Table.from_batches(list(read_replica(tmp_path, "public.t", SCHEMA, KEY, [], 5, PushedSubplan(), SCHEMA)),
                                 schema=SCHEMA).num_rows == 0


def test_read_replica_names_a_missing_delta(tmp_path):
    with pytest.raises(DamagedReplicaError, match=r"^damaged replica: delta file .*gone.parquet is missing \(table public.t\)"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["gone.parquet"], 5, PushedSubplan(), SCHEMA))


def test_read_replica_names_a_corrupt_delta(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(DamagedReplicaError, match=r"^damaged replica: delta file .*bad.parquet is corrupt"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["bad.parquet"], 5, PushedSubplan(), SCHEMA))


def test_a_corrupt_page_behind_an_intact_footer_is_damage(tmp_path):
    rows = [version(k, k * 7919, f"x{k}" * 5, k / 7, seq=1) for k in range(20000)]
    pq.write_table(as_delta(rows), tmp_path / "d.parquet", compression="zstd")
    data = bytearray((tmp_path / "d.parquet").read_bytes())
    data[len(data) // 3: len(data) // 3 + 2000] = b"\xff" * 2000  # inside the data pages, footer untouched
    (tmp_path / "d.parquet").write_bytes(bytes(data))
    sp = PushedSubplan(aggregates=(Aggregate("sum", "a"), Aggregate("count", "b")))
    out = pa.schema([("s", pa.decimal128(38, 0)), ("n", pa.int64())])
    with pytest.raises(DamagedReplicaError, match="d.parquet is corrupt"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, sp, out))


def test_our_own_failing_sql_over_intact_files_is_not_damage(tmp_path):
    # A pushed filter DuckDB cannot evaluate here ('x' is no integer): an error in our SQL, not
    # in the files, so it must not mark the table unhealthy (only DamagedReplicaError does).
    pq.write_table(as_delta([version(1, 5, "x", seq=1)]), tmp_path / "d.parquet")
    sp = PushedSubplan(columns=("k",), filters=(cmp("eq", "a", "string", "x"),))
    with pytest.raises(InternalQueryError, match="failed on intact files") as e:
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, sp, pa.schema([("k", pa.int64())])))
    assert not isinstance(e.value, ReplicaError)


def test_read_replica_refuses_a_result_of_the_wrong_width(tmp_path):
    pq.write_table(as_delta([version(1, seq=1)]), tmp_path / "d.parquet")
    with pytest.raises(InternalQueryError, match="replica query returned 4 columns, Spark expects 1"):
        list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 5, PushedSubplan(), pa.schema([("k", pa.int64())])))


def test_no_test_switch_is_left_on():
    assert os.environ.get(BREAK_PUSHDOWN_ENV) != "1"


def test_a_scan_that_needs_no_column_returns_rows_without_columns(tmp_path):
    # `SELECT 1 FROM t` or `count(*)` under a filter Spark keeps: Spark prunes every column and
    # wants the rows as zero-column batches. DuckDB has no zero-column SELECT: this used to be a
    # parser error reported as a damaged replica (and the table was marked unhealthy).
    pq.write_table(as_delta([version(k, k, seq=1) for k in range(5)] + [version(3, seq=2, op=OP_DELETE)]), tmp_path / "d.parquet")
    empty = pa.schema([])
    for sp in (PushedSubplan(columns=()), PushedSubplan(columns=(), filters=(cmp("gt", "a", "long", 0),))):
        batches = list(read_replica(tmp_path, "public.t", SCHEMA, KEY, ["d.parquet"], 2, sp, empty))
        assert all(b.num_columns == 0 and b.schema.equals(empty) for b in batches)
        assert sum(b.num_rows for b in batches) == (4 if not sp.filters else 3)
