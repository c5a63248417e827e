"""replica/deltas.sort_versions: Arrow's sort keeps exactly what DuckDB's window kept, in DuckDB's
order (strings by bytes, NaN last, -0.0 equal to 0.0), for composite keys."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from unit_support import PROPERTY

from htap.replica.deltas import _sort_versions_sql, sort_versions
from htap.replica.models import ORD, SEQ

KEY = ["s", "f"]


def rows(t: pa.Table) -> list:
    return [tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r.values()) for r in t.to_pylist()]


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(["", "a", "b", "ä", "aa"]),
                          st.sampled_from([0.0, -0.0, 1.5, -2.0, math.nan, math.inf]),
                          st.integers(1, 3), st.integers(-9, 9)), max_size=40))
def test_arrow_sort_keeps_what_the_sql_kept(changes):
    data = pa.table({
        "s": pa.array([c[0] for c in changes], pa.string()),
        "f": pa.array([c[1] for c in changes], pa.float64()),
        "v": pa.array([c[3] for c in changes], pa.int64()),
        SEQ: pa.array([c[2] for c in changes], pa.int64()),
        ORD: pa.array(range(len(changes)), pa.int64()),
    })
    got, want = sort_versions(data, KEY), _sort_versions_sql(data, KEY)
    assert got.schema == want.schema
    # -0.0 and 0.0 are one key: which of them a row shows may differ, not the rows kept.
    assert [tuple(0.0 if v == 0 and isinstance(v, float) else v for v in r) for r in rows(got)] == \
           [tuple(0.0 if v == 0 and isinstance(v, float) else v for v in r) for r in rows(want)]
