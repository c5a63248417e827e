"""Reading a few rows of a delta file (the before-images a checkpoint reads for views,
htap.replica.deltas._read_rows): DuckDB reads the columns it returns exactly, pyarrow the rest —
both give the same rows, in the order asked, bit for bit (-0.0, NaN, NULLs, extreme values)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from htap.replica.deltas import _duckdb_exact, _read_row_groups, _read_rows
from htap.replica.models import OP, SEQ

N = 5000


def _columns(rng: np.random.Generator) -> dict[str, pa.Array]:
    def pick(values, t):
        return pa.array([values[i] for i in rng.integers(0, len(values), N)], t)

    return {
        "i8": pick([None, -128, 0, 127], pa.int8()),
        "i64": pick([None, -(2**63), 0, 2**63 - 1, 7], pa.int64()),
        "u64": pick([None, 0, 2**64 - 1], pa.uint64()),
        "f32": pick([None, -0.0, float("nan"), float("inf"), 1.5], pa.float32()),
        "f64": pick([None, -0.0, 0.0, float("nan"), float("-inf"), 5e-324], pa.float64()),
        "dec": pick([None, Decimal("-9999999999999.99"), Decimal("0.01")], pa.decimal128(15, 2)),
        "dec38": pick([None, Decimal("9" * 38), Decimal("-1")], pa.decimal128(38, 0)),
        "s": pick([None, "", "é ", "a\x00b", "x" * 300], pa.string()),
        "bin": pick([None, b"", b"\x00\xff"], pa.binary()),
        "b": pick([None, True, False], pa.bool_()),
        "d": pick([None, datetime.date(1, 1, 1), datetime.date(9999, 12, 31)], pa.date32()),
        # read by pyarrow (not `_duckdb_exact`)
        "dec76": pick([None, Decimal("1" * 60)], pa.decimal256(76, 0)),
        "t": pick([None, datetime.time(23, 59, 59, 999999)], pa.time64("us")),
        "ts": pick([None, datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)], pa.timestamp("us", tz="UTC")),
        "l": pick([None, [1, None], []], pa.list_(pa.int32())),
    }


@pytest.mark.parametrize("with_slow_types", [False, True])
def test_a_few_rows_read_by_duckdb_equal_the_row_groups_read_by_pyarrow(tmp_path, with_slow_types):
    rng = np.random.default_rng(31)
    columns = _columns(rng)
    if not with_slow_types:
        columns = {k: v for k, v in columns.items() if _duckdb_exact(v.type)}
    else:
        assert not all(_duckdb_exact(v.type) for v in columns.values())
    table = pa.table({**columns, SEQ: pa.array(np.arange(N), pa.int64()), OP: pa.array(np.zeros(N), pa.int8())})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=700)
    rows = rng.choice(N, 120, replace=False).astype(np.int64)  # (unsorted: the order asked is kept)
    names = list(columns)
    got = _read_rows(path, rows, names)
    expected = _read_row_groups(path, rows, [*names, SEQ, OP])
    assert got.column_names == [*names, SEQ, OP, "_unset"]
    assert got.schema.remove(got.schema.get_field_index("_unset")) == expected.schema
    for name in expected.column_names:
        assert repr(got.column(name).to_pylist()) == repr(expected.column(name).to_pylist()), name
    assert got.column(SEQ).to_pylist() == rows.tolist()
