"""The bridge's read planning (htap.pushdown.read_planning) parses the answer Spark's
`plan_data_source_read` worker writes: a length-prefixed read function, a count, and
length-prefixed partitions, whatever their sizes."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from pyspark.serializers import write_int, write_with_length

from htap.pushdown.read_planning import PlannedRead, _parse


@given(func=st.binary(max_size=3000), partitions=st.lists(st.binary(max_size=500), max_size=20))
def test_the_workers_answer_parses_back(func, partitions):
    out = io.BytesIO()
    write_with_length(func, out)
    write_int(len(partitions), out)
    for p in partitions:
        write_with_length(p, out)
    assert _parse(out.getvalue()) == PlannedRead(func, tuple(partitions))
