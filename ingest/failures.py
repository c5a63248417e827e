"""Failed tables: the one message that says what failed, where, and what to do.

A table fails when a value or change cannot be applied (a value its replica type cannot hold, a
change the replica cannot follow). Only that table stops: its reads fail over to the source, the
rest of its source keeps streaming and the source's position keeps moving. The message is what
`htap status`, `<catalog>.htap.tables` and the service log show.
"""

from __future__ import annotations

import logging

from htap.connectors.tables import OVERRIDE_TYPES
from htap.errors import HtapError, PoisonError
from htap.replica.models import TableInfo
from htap.seq import PLAIN, SeqCodec

log = logging.getLogger(__name__)


def failure_message(source: str, codec: SeqCodec, table: TableInfo, error: HtapError, seq: int | None, during: str) -> str:
    """`during`: "the change stream" or "the initial copy"."""
    name = table.qualified_name
    at = f" at seq {(codec or PLAIN).format(seq)}" if seq is not None else ""
    head = f"source {source}, table {name}: {during}{at}: {error}"
    if isinstance(error, PoisonError) and error.column:
        fix = (
            f"change the column's type in the source (the table is then copied again by itself), or give the "
            f"column a replica type that holds the value and copy the table again: "
            f"`htap tables recopy {name} --column-type {error.column}=<{OVERRIDE_TYPES}>`"
        )
    else:
        fix = f"fix the cause in the source (a change of the table's columns re-copies it by itself), or run `htap tables recopy {name}`"
    return f"{head}. The table stopped (failed); its reads go to the source, the rest of source {source} keeps streaming. To fix: {fix}"


def log_failure(message: str) -> None:
    log.error("%s", message)
