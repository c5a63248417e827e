"""Routing: does a scan read the replica or the source, and at which seq?

Pure decision over the table's state, so it is tested on its own and every decision carries a
reason (recorded with the scan and shown in `htap status` and `<catalog>.htap.tables`).

The replica when the table is healthy and readable, not failed over, fresh enough (its delay is
within `htap.max_staleness`) and the asked-for seq is inside its queryable window; the source
otherwise. A time-travel read cannot fall back (the source has only its present): outside the
window it is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from htap.errors import HtapError
from htap.replica.models import TableInfo
from htap.replica.read_plans import Window

ROUTE_AUTO, ROUTE_REPLICA, ROUTE_SOURCE = "auto", "replica", "source"
ROUTES = (ROUTE_AUTO, ROUTE_REPLICA, ROUTE_SOURCE)


class RoutingError(HtapError):
    """Neither side can answer the scan as asked."""


@dataclass(frozen=True)
class Route:
    target: str  # "replica" or "source"
    seq: int | None  # the replica seq to read (None for the source)
    reason: str


def decide(
    table: TableInfo,
    window: Window | None,
    now: float,
    *,
    mode: str = ROUTE_AUTO,
    as_of: int | None = None,
    snapshot: int | None = None,
    unavailable: str | None = None,
) -> Route:
    """Where one scan of `table` reads. `as_of`: an explicit time-travel seq; `snapshot`: the
    query's shared snapshot seq (from the snapshot rule), if any; `unavailable`: why the
    warehouse cannot be read now (an unreachable object store), if it cannot."""
    name = table.qualified_name
    if mode == ROUTE_SOURCE:
        if as_of is not None:
            raise RoutingError(f"{name}: time travel reads the replica, but this catalog routes to the source")
        return Route(ROUTE_SOURCE, None, "catalog option route=source")
    problem = None
    if unavailable is not None:
        problem = unavailable
    elif table.failover:
        problem = "failover is on for the table"
    elif window is None:
        problem = f"the replica is {table.state}" + (f": {table.error}" if table.error else "")
    elif as_of is None and table.max_staleness_s is not None and table.max_safe_time is not None:
        delay = now - table.max_safe_time
        if delay > table.max_staleness_s:
            problem = f"the replica is {delay:.1f} s behind, more than htap.max_staleness={table.max_staleness_s:g} s"
    seq = as_of if as_of is not None else snapshot
    if problem is None and window is not None:
        seq = window.max_seq if seq is None else seq
        if not window.min_seq <= seq <= window.max_seq:
            problem = f"seq {seq} is outside the queryable window [{window.min_seq}, {window.max_seq}]"
    if problem is None:
        return Route(ROUTE_REPLICA, seq, "replica healthy and fresh" if as_of is None else f"time travel to seq {seq}")
    if as_of is not None:
        raise RoutingError(f"{name}: cannot time travel to seq {as_of}: {problem}")
    if mode == ROUTE_REPLICA:
        raise RoutingError(f"{name}: the catalog requires the replica (route=replica), but {problem}")
    return Route(ROUTE_SOURCE, None, f"failed over to the source: {problem}")
