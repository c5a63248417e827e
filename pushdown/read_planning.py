"""A scan's read planned in the driver's bridge process instead of a Spark planning worker.

For every scan Spark sends the pickled data source and the read schema to a Python planning
worker (`pyspark.sql.worker.plan_data_source_read`), which builds the reader (for us: routing,
snapshot, pin, routing record) and answers with the pickled read function and the pickled
partitions. That round trip costs a worker handshake and the worker's own Python on top of our
planning. The Java shim (io.sparkhtap.PickledDataSource) asks the driver's already-running
bridge process (htap.catalog.bridge `plan-read`) instead, which runs Spark's own
`write_read_func_and_partitions` on the same reader here, and hands the answer to Spark as the
data source's read info: byte for byte what the worker would have sent.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedRead:
    """Spark's PythonDataSourceReadInfo: the pickled read function and one pickle per partition."""

    func: bytes
    partitions: tuple[bytes, ...]


def plan_read(options: dict[str, str], schema_json: str, max_arrow_batch_size: int,
              binary_as_bytes: bool) -> PlannedRead:
    """Plan a batch read of the `htap` data source with `options` (the scan's, as Spark has them)
    and output schema `schema_json` (Spark's StructType JSON), as Spark's planning worker would.
    Errors are the reader's own (their markers reach the Java shim's HtapBatch.translate)."""
    from pyspark.sql.types import StructType, _parse_datatype_json_string
    from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions

    from htap.pushdown.datasource import data_source

    schema = _parse_datatype_json_string(schema_json)
    if not isinstance(schema, StructType):
        raise ValueError(f"a read schema must be a struct, got {schema_json[:200]}")
    source = data_source(options)
    out = io.BytesIO()
    write_read_func_and_partitions(out, reader=source.reader(schema=schema), data_source=source, schema=schema,
                                   max_arrow_batch_size=max_arrow_batch_size, binary_as_bytes=binary_as_bytes)
    return _parse(out.getvalue())


def _parse(answer: bytes) -> PlannedRead:
    """The worker's answer: a length-prefixed function, a count, length-prefixed partitions
    (big-endian int32 lengths, pyspark.serializers.write_int)."""
    view = memoryview(answer)
    at = 0

    def take_int() -> int:
        nonlocal at
        (n,) = struct.unpack_from("!i", view, at)
        at += 4
        return n

    def take_bytes() -> bytes:
        nonlocal at
        n = take_int()
        b = bytes(view[at:at + n])
        at += n
        return b

    func = take_bytes()
    partitions = tuple(take_bytes() for _ in range(take_int()))
    if at != len(answer):
        raise ValueError(f"planned read: {len(answer) - at} bytes left over")
    return PlannedRead(func, partitions)
