"""replica/partitions.py: split points, rows to partitions, partition pruning by key filters."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY, UTC, cmp, col, in_, is_null, not_, op, or_, value

from htap import engine
from htap.rewrite.pushed import Literal
from htap.replica.partitions import (
    choose_splits,
    decode_bounds,
    encode_bounds,
    key_bound,
    matching_partitions,
    partition_count,
    split_by_partition,
)

# --- bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "splits",
    [
        pa.array([10, 20, 30], pa.int64()),
        pa.array([-5], pa.int32()),
        pa.array(["b", "m", "x\u00e9"], pa.string()),
        pa.array([dt.date(2020, 1, 1), dt.date(2024, 2, 29)], pa.date32()),
        pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us")),
        pa.array([decimal.Decimal("1.50"), decimal.Decimal("99.99")], pa.decimal128(6, 2)),
        pa.array([-0.5, 2.5], pa.float64()),
        pa.array([b"\x00", b"\xff"], pa.binary()),
    ],
    ids=lambda a: str(a.type),
)
def test_bounds_round_trip_with_their_type(splits):
    text = encode_bounds(splits)
    assert isinstance(text, str) and text.isascii()
    back = decode_bounds(text)
    assert back.type == splits.type
    assert back.equals(splits)


def test_no_bounds_is_one_partition():
    assert decode_bounds(None) is None
    assert decode_bounds("") is None
    assert partition_count(None) == 1
    assert partition_count(pa.array([1, 2, 3])) == 4


@PROPERTY
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30, unique=True).map(sorted))
def test_int_bounds_round_trip(values):
    assert decode_bounds(encode_bounds(pa.array(values, pa.int64()))).to_pylist() == values


# --- choose_splits -----------------------------------------------------------------------------


@pytest.fixture
def con():
    c = engine.cursor()
    yield c
    c.close()


def test_equal_count_quantiles(con):
    con.register("rel", pa.table({"k": list(range(1, 101))}))
    splits = choose_splits(con, "rel", "k", 100, 25)
    assert splits.to_pylist() == [25, 50, 75]
    sizes = [rows.num_rows for _, rows in split_by_partition(con.sql("SELECT * FROM rel").to_arrow_table(), "k", splits)]
    assert sizes == [24, 25, 25, 26]


def test_a_table_that_fits_one_partition_has_no_splits(con):
    con.register("rel", pa.table({"k": [3, 1, 2]}))
    assert choose_splits(con, "rel", "k", 3, 3) is None
    assert choose_splits(con, "rel", "k", 3, 1_000_000) is None
    assert choose_splits(con, "rel", "k", 0, 10) is None


def test_splits_are_sorted_and_unique_even_with_duplicate_first_key_values(con):
    # key0 of a composite key repeats: quantiles repeat too, and collapse
    con.register("rel", pa.table({"k": [7] * 40 + [3] * 40 + [9] * 20}))
    splits = choose_splits(con, "rel", "k", 100, 10).to_pylist()
    assert splits == sorted(set(splits))
    assert set(splits) <= {3, 7, 9}


def test_string_and_timestamp_keys(con):
    con.register("rel", pa.table({"k": [f"k{i:03d}" for i in range(100)]}))
    assert choose_splits(con, "rel", "k", 100, 50).to_pylist() == ["k049"]
    stamps = [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i) for i in range(10)]
    con.register("rel2", pa.table({"k": pa.array(stamps, pa.timestamp("us", tz="UTC"))}))
    splits = choose_splits(con, "rel2", "k", 10, 5)
    assert len(splits) == 1 and splits[0].as_py() == stamps[4]


def test_zero_target_rows_is_treated_as_one(con):
    con.register("rel", pa.table({"k": [1, 2, 3]}))
    assert choose_splits(con, "rel", "k", 3, 0).to_pylist() == [1, 2]


# --- split_by_partition --------------------------------------------------------------------------


def test_rows_go_to_half_open_ranges():
    data = pa.table({"k": [5, 10, 15, 20, 25, 9, 30], "v": list("abcdefg")})
    parts = split_by_partition(data, "k", pa.array([10, 20]))
    assert [(p, rows.column("k").to_pylist()) for p, rows in parts] == [(0, [5, 9]), (1, [10, 15]), (2, [20, 25, 30])]
    assert parts[0][1].column("v").to_pylist() == ["a", "f"]  # whole rows travel


def test_empty_partitions_are_left_out():
    parts = split_by_partition(pa.table({"k": [1, 2, 30]}), "k", pa.array([10, 20]))
    assert [p for p, _ in parts] == [0, 2]


def test_without_splits_everything_is_partition_zero():
    data = pa.table({"k": [3, 1]})
    assert split_by_partition(data, "k", None) == [(0, data)]
    assert split_by_partition(data.slice(0, 0), "k", None) == []
    assert split_by_partition(data.slice(0, 0), "k", pa.array([2])) == []


# --- matching_partitions -------------------------------------------------------------------------

SPLITS = pa.array([10, 20, 30], pa.int64())  # partitions: (-inf,10) [10,20) [20,30) [30,inf)
CASES = [
    ("no filters", [], [0, 1, 2, 3]),
    ("eq", [cmp("eq", "k", "long", 15)], [1]),
    ("eq on a split point", [cmp("eq", "k", "long", 20)], [2]),
    ("eq below all", [cmp("eq", "k", "long", -(2**63))], [0]),
    ("eq above all", [cmp("eq", "k", "long", 10**9)], [3]),
    ("in", [in_("k", ("long", 1), ("long", 35), ("long", 10))], [0, 1, 3]),
    ("in, no values", [in_("k")], []),
    ("in with a null", [in_("k", ("long", 1), ("null", None))], [0, 1, 2, 3]),
    ("gt", [cmp("gt", "k", "long", 25)], [2, 3]),
    ("ge", [cmp("ge", "k", "long", 20)], [2, 3]),
    ("lt", [cmp("lt", "k", "long", 10)], [0, 1]),  # conservative: [10, ...) cannot match, but is kept
    ("le", [cmp("le", "k", "long", 9)], [0]),
    ("range", [cmp("ge", "k", "long", 12), cmp("lt", "k", "long", 22)], [1, 2]),
    ("empty range", [cmp("gt", "k", "long", 35), cmp("lt", "k", "long", 5)], []),
    ("eq and range disagree", [cmp("eq", "k", "long", 5), cmp("gt", "k", "long", 25)], []),
    ("another column", [cmp("eq", "other", "long", 15)], [0, 1, 2, 3]),
    ("null-safe eq does not prune", [cmp("eq_null_safe", "k", "long", 15)], [0, 1, 2, 3]),
    ("is null does not prune", [is_null("k")], [0, 1, 2, 3]),
    ("null literal", [cmp("eq", "k", "null", None)], [0, 1, 2, 3]),
    ("a double that is not an integer", [cmp("eq", "k", "double", 15.5)], [0, 1, 2, 3]),
    ("a double that is an integer", [cmp("eq", "k", "double", 15.0)], [1]),
    ("a decimal string", [cmp("lt", "k", "decimal", "9")], [0]),
    ("a decimal with a fraction", [cmp("eq", "k", "decimal", "9.5")], [0, 1, 2, 3]),
    ("out of the key type's range", [cmp("eq", "k", "decimal", "99999999999999999999")], [0, 1, 2, 3]),
    ("a non-numeric string", [cmp("eq", "k", "string", "abc")], [0, 1, 2, 3]),
    ("a prunable filter next to one that cannot prune", [cmp("eq", "k", "string", "x"), cmp("eq", "k", "long", 31)], [3]),
    # IR conjuncts (htap.rewrite.pushed): the literal on the left is the comparison flipped
    ("literal = key", [op("=", value("long", 15), col("k", "bigint"))], [1]),
    ("literal < key: key > literal", [op("<", value("long", 25), col("k", "bigint"))], [2, 3]),
    ("literal >= key: key <= literal", [op(">=", value("long", 9), col("k", "bigint"))], [0]),
    ("<> does not prune", [cmp("<>", "k", "long", 15)], [0, 1, 2, 3]),
    ("key compared with a column does not prune", [op("=", col("k", "bigint"), col("other", "bigint"))], [0, 1, 2, 3]),
    ("key compared with an expression does not prune", [
        op("=", col("k", "bigint"), op("+", value("long", 1), value("long", 14), type_="bigint"))], [0, 1, 2, 3]),
    ("an expression of the key does not prune", [
        op("=", op("+", col("k", "bigint"), value("long", 1), type_="bigint"), value("long", 15))], [0, 1, 2, 3]),
    ("in with a column among the values does not prune", [
        op("IN", col("k", "bigint"), value("long", 1), col("other", "bigint"))], [0, 1, 2, 3]),
    ("a literal in a list of the key does not prune", [op("IN", value("long", 15), col("k", "bigint"))], [0, 1, 2, 3]),
    ("not of an eq does not prune", [not_(cmp("eq", "k", "long", 15))], [0, 1, 2, 3]),
    ("an or of eqs does not prune", [or_(cmp("eq", "k", "long", 5), cmp("eq", "k", "long", 35))], [0, 1, 2, 3]),
]


@pytest.mark.parametrize("case,filters,expected", CASES, ids=[c[0] for c in CASES])
def test_matching_partitions(case, filters, expected):
    assert matching_partitions(SPLITS, "k", filters) == expected


@pytest.mark.parametrize("conjunct, expected", [
    (cmp("eq", "k", "long", 5), ("=", [Literal("long", 5)])),
    (cmp("lt", "k", "long", 5), ("<", [Literal("long", 5)])),
    (op("<", value("long", 5), col("k")), (">", [Literal("long", 5)])),
    (op("<=", value("long", 5), col("k")), (">=", [Literal("long", 5)])),
    (op(">", value("long", 5), col("k")), ("<", [Literal("long", 5)])),
    (op(">=", value("long", 5), col("k")), ("<=", [Literal("long", 5)])),
    (in_("k", ("long", 1), ("null", None)), ("IN", [Literal("long", 1), Literal("null", None)])),
    (cmp("eq", "other", "long", 5), None),
    (cmp("eq_null_safe", "k", "long", 5), None),
    (is_null("k"), None),
    (col("k", "boolean"), None),
    (value("boolean", True), None),
])
def test_key_bound_reads_key_comparisons_with_literals_either_way_round(conjunct, expected):
    assert key_bound(conjunct, "k") == expected


def test_one_partition_is_always_read():
    assert matching_partitions(None, "k", [cmp("eq", "k", "long", 5)]) == [0]


def test_nested_predicates_do_not_prune():
    from unit_support import and_

    assert matching_partitions(SPLITS, "k", [and_(cmp("eq", "k", "long", 5), cmp("eq", "k", "long", 6))]) == [0, 1, 2, 3]


def test_timestamp_keys():
    t = pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 7, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    micros = lambda d: (d - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)  # noqa: E731
    assert matching_partitions(t, "ts", [cmp("eq", "ts", "timestamp", micros(dt.datetime(2024, 3, 1, tzinfo=UTC)))]) == [1]
    assert matching_partitions(t, "ts", [cmp("lt", "ts", "timestamp", 0)]) == [0]
    assert matching_partitions(t, "ts", [cmp("eq", "ts", "timestamp", micros(dt.datetime(2024, 7, 1, tzinfo=UTC)))]) == [2]
    naive = pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))
    assert matching_partitions(naive, "ts", [cmp("ge", "ts", "timestamp_ntz", "2024-01-01T00:00")]) == [1]
    assert matching_partitions(naive, "ts", [cmp("eq", "ts", "timestamp_ntz", "2023-12-31T23:59:59.999999")]) == [0]


def test_date_and_string_keys():
    days = pa.array([dt.date(2024, 1, 1)], pa.date32())
    assert matching_partitions(days, "d", [cmp("eq", "d", "date", "2023-12-31")]) == [0]
    assert matching_partitions(days, "d", [cmp("eq", "d", "date", "2024-01-01")]) == [1]
    words = pa.array(["m"], pa.string())
    assert matching_partitions(words, "s", [in_("s", ("string", "a"), ("string", "z"))]) == [0, 1]
    assert matching_partitions(words, "s", [cmp("eq", "s", "string", "m")]) == [1]


# --- properties --------------------------------------------------------------------------------

int_keys = st.lists(st.integers(-1000, 1000), min_size=1, max_size=60, unique=True)
int_splits = st.lists(st.integers(-1100, 1100), max_size=6, unique=True).map(sorted)


@PROPERTY
@given(int_keys, int_splits)
def test_every_key_lands_in_exactly_the_partition_eq_pruning_keeps(keys, splits):
    arr = pa.array(splits, pa.int64()) if splits else None
    data = pa.table({"k": pa.array(keys, pa.int64()), "i": list(range(len(keys)))})
    parts = split_by_partition(data, "k", arr)
    seen = [i for _, rows in parts for i in rows.column("i").to_pylist()]
    assert sorted(seen) == list(range(len(keys)))  # every row once: none lost, none twice
    assert [p for p, _ in parts] == sorted({p for p, _ in parts})
    for part, rows in parts:
        for k in rows.column("k").to_pylist():
            assert matching_partitions(arr, "k", [cmp("eq", "k", "long", k)]) == [part]


@PROPERTY
@given(int_keys, int_splits, st.sampled_from(["gt", "ge", "lt", "le"]), st.integers(-1100, 1100))
def test_range_pruning_never_drops_a_matching_row(keys, splits, op, bound):
    arr = pa.array(splits, pa.int64()) if splits else None
    data = pa.table({"k": pa.array(keys, pa.int64())})
    kept = set(matching_partitions(arr, "k", [cmp(op, "k", "long", bound)]))
    test = {"gt": pc.greater, "ge": pc.greater_equal, "lt": pc.less, "le": pc.less_equal}[op]
    for part, rows in split_by_partition(data, "k", arr):
        if pc.any(test(rows.column("k"), bound)).as_py():
            assert part in kept


# --- double keys: NaN sorts above every number (as in Postgres, DuckDB and Spark) -----------------

float_keys = st.lists(
    st.floats(allow_nan=False, allow_infinity=True, width=64).map(lambda f: 0.0 if f == 0 else f),
    max_size=40, unique=True,
)
float_splits = st.lists(st.floats(allow_nan=False, allow_infinity=True), max_size=5, unique=True).map(sorted)


def test_a_nan_key_is_kept_and_found_in_the_last_partition():
    data = pa.table({"k": pa.array([1.0, float("nan"), -1.0, float("inf")])})
    splits = pa.array([0.5], pa.float64())
    parts = split_by_partition(data, "k", splits)
    assert sum(rows.num_rows for _, rows in parts) == 4  # the NaN row used to vanish here
    assert [(p, sorted(map(repr, rows.column("k").to_pylist()))) for p, rows in parts] == [
        (0, ["-1.0"]), (1, ["1.0", "inf", "nan"])
    ]
    assert matching_partitions(splits, "k", [cmp("eq", "k", "double", "NaN")]) == [1]
    assert matching_partitions(splits, "k", [cmp("gt", "k", "double", 1e308)]) == [1]
    assert matching_partitions(splits, "k", [cmp("lt", "k", "double", "NaN")]) == [0, 1]


def test_a_nan_split_point_keeps_every_row():
    data = pa.table({"k": pa.array([1.0, float("nan"), -1.0])})
    splits = pa.array([0.0, float("nan")], pa.float64())
    parts = split_by_partition(data, "k", splits)
    assert [(p, rows.num_rows) for p, rows in parts] == [(0, 1), (1, 1), (2, 1)]
    assert matching_partitions(splits, "k", [cmp("eq", "k", "double", "NaN")]) == [2]
    assert matching_partitions(splits, "k", [cmp("eq", "k", "double", 5.0)]) == [1]


@PROPERTY
@given(float_keys, st.booleans(), float_splits, st.booleans())
def test_double_keys_land_where_eq_pruning_looks(keys, with_nan, splits, nan_split):
    keys = keys + ([float("nan")] if with_nan else [])
    splits = splits + ([float("nan")] if nan_split else [])
    arr = pa.array(splits, pa.float64()) if splits else None
    data = pa.table({"k": pa.array(keys, pa.float64()), "i": list(range(len(keys)))})
    parts = split_by_partition(data, "k", arr)
    assert sorted(i for _, rows in parts for i in rows.column("i").to_pylist()) == list(range(len(keys)))
    for part, rows in parts:
        for k in rows.column("k").to_pylist():
            assert matching_partitions(arr, "k", [cmp("eq", "k", "double", k)]) == [part]


# --- the initial copy's dataset filter selects the same rows as split_by_partition -----------------


def _copy_parts(data: pa.Table, key0: str, splits) -> list[tuple[int, list]]:
    import pyarrow.dataset as ds

    from htap.replica.partitions import partition_filter

    dataset = ds.dataset(data)
    out = []
    for part in range(partition_count(splits)):
        rows = dataset.to_table(filter=partition_filter(key0, splits, part))
        if rows.num_rows:
            out.append((part, sorted(rows.column("i").to_pylist())))
    return out


def test_the_copy_filter_keeps_a_nan_key():
    data = pa.table({"k": [1.0, float("nan"), -1.0], "i": [0, 1, 2]})
    assert _copy_parts(data, "k", pa.array([0.5])) == [(0, [2]), (1, [0, 1])]


def test_the_copy_filter_without_splits_is_everything():
    from htap.replica.partitions import partition_filter

    assert partition_filter("k", None, 0) is None


@PROPERTY
@given(st.one_of(
    st.tuples(int_keys.map(lambda ks: pa.array(ks, pa.int64())), int_splits.map(lambda s: pa.array(s, pa.int64()) if s else None)),
    st.tuples(
        st.tuples(float_keys, st.booleans()).map(lambda t: pa.array(t[0] + ([float("nan")] if t[1] else []), pa.float64())),
        st.tuples(float_splits, st.booleans()).map(
            lambda t: pa.array(t[0] + ([float("nan")] if t[1] else []), pa.float64()) if t[0] or t[1] else None),
    ),
))
def test_the_copy_filter_and_split_by_partition_agree(keys_and_splits):
    keys, splits = keys_and_splits
    data = pa.table({"k": keys, "i": list(range(len(keys)))})
    expected = [(p, sorted(rows.column("i").to_pylist())) for p, rows in split_by_partition(data, "k", splits)]
    assert _copy_parts(data, "k", splits) == expected
    assert sorted(i for _, ids in expected for i in ids) == list(range(len(keys)))
