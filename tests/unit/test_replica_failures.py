"""What a failed replica query means (htap.pushdown.replica_reader._failure): on intact files, a
value the data holds that a pushed cast or sum cannot represent is the data's ANSI error, as
Spark reports it; anything else is our bug."""

from __future__ import annotations

import duckdb
import pytest

from htap.errors import InternalQueryError, QueryValueError
from htap.pushdown.replica_reader import _failure


def _error(sql: str) -> duckdb.Error:
    with pytest.raises(duckdb.Error) as e:
        duckdb.connect().sql(sql).fetchall()
    return e.value


@pytest.mark.parametrize("sql", [
    "SELECT CAST(sum(x) AS BIGINT) FROM (VALUES (9223372036854775807::HUGEINT), (5::HUGEINT)) t(x)",  # a partial sum
    "SELECT -(-32768::SMALLINT)",
])
def test_values_the_data_holds_are_spark_ansi_errors(sql):
    failure = _failure(_error(sql), {})
    assert isinstance(failure, QueryValueError) and "ARITHMETIC_OVERFLOW" in str(failure)


def test_anything_else_is_our_bug():
    assert isinstance(_failure(_error("SELECT no_such_column FROM (VALUES (1)) t(x)"), {}), InternalQueryError)
