"""pushdown/routing.py `decide`: every branch, with its exact (golden) reason."""

from __future__ import annotations

import pytest
from unit_support import make_table

from htap.errors import HtapError
from htap.pushdown.routing import ROUTE_AUTO, ROUTE_REPLICA, ROUTE_SOURCE, Route, RoutingError, decide
from htap.replica.models import STATE_CATCHING_UP, STATE_UNHEALTHY
from htap.replica.read_plans import Window

NOW = 10_000.0
WINDOW = Window(50, 100)


def table(**kw):
    kw.setdefault("max_safe_time", NOW - 2.0)  # 2 s behind
    return make_table(db_schema="public", name="orders", **kw)


# (case, table kwargs, window, decide kwargs, expected route)
ROUTES = [
    ("healthy: newest safe seq", {}, WINDOW, {}, Route("replica", 100, "replica healthy and fresh")),
    ("healthy: query snapshot", {}, WINDOW, {"snapshot": 70}, Route("replica", 70, "replica healthy and fresh")),
    ("snapshot at the window's low end", {}, WINDOW, {"snapshot": 50}, Route("replica", 50, "replica healthy and fresh")),
    ("time travel inside", {}, WINDOW, {"as_of": 60}, Route("replica", 60, "time travel to seq 60")),
    ("time travel wins over the snapshot", {}, WINDOW, {"as_of": 60, "snapshot": 90}, Route("replica", 60, "time travel to seq 60")),
    ("time travel to the window's high end", {}, WINDOW, {"as_of": 100}, Route("replica", 100, "time travel to seq 100")),
    ("route=replica, healthy", {}, WINDOW, {"mode": ROUTE_REPLICA}, Route("replica", 100, "replica healthy and fresh")),
    ("route=source", {}, WINDOW, {"mode": ROUTE_SOURCE}, Route("source", None, "catalog option route=source")),
    ("route=source ignores failover and health", {"failover": True, "state": STATE_UNHEALTHY}, None,
     {"mode": ROUTE_SOURCE, "snapshot": 70}, Route("source", None, "catalog option route=source")),
    ("failover", {"failover": True}, WINDOW, {},
     Route("source", None, "failed over to the source: failover is on for the table")),
    ("failover wins over unhealthy", {"failover": True, "state": STATE_UNHEALTHY, "error": "x"}, None, {},
     Route("source", None, "failed over to the source: failover is on for the table")),
    ("unhealthy with its error", {"state": STATE_UNHEALTHY, "error": "delta file a.parquet is missing"}, None, {},
     Route("source", None, "failed over to the source: the replica is unhealthy: delta file a.parquet is missing")),
    ("not readable yet", {"state": STATE_CATCHING_UP}, None, {},
     Route("source", None, "failed over to the source: the replica is catching_up")),
    ("stale", {"max_staleness_s": 1.5}, WINDOW, {},
     Route("source", None, "failed over to the source: the replica is 2.0 s behind, more than htap.max_staleness=1.5 s")),
    ("exactly as stale as allowed", {"max_staleness_s": 2.0}, WINDOW, {}, Route("replica", 100, "replica healthy and fresh")),
    ("fresh enough", {"max_staleness_s": 30}, WINDOW, {}, Route("replica", 100, "replica healthy and fresh")),
    ("staleness without a safe time is not checked", {"max_staleness_s": 0.001, "max_safe_time": None}, WINDOW, {},
     Route("replica", 100, "replica healthy and fresh")),
    ("time travel ignores staleness", {"max_staleness_s": 0.5}, WINDOW, {"as_of": 55}, Route("replica", 55, "time travel to seq 55")),
    ("snapshot below the window", {}, WINDOW, {"snapshot": 49},
     Route("source", None, "failed over to the source: seq 49 is outside the queryable window [50, 100]")),
    ("snapshot above the window", {}, WINDOW, {"snapshot": 101},
     Route("source", None, "failed over to the source: seq 101 is outside the queryable window [50, 100]")),
    ("an unreachable warehouse", {}, WINDOW, {"unavailable": "the object store is unreachable"},
     Route("source", None, "failed over to the source: the object store is unreachable")),
    ("stale is reported before the window", {"max_staleness_s": 1}, WINDOW, {"snapshot": 500},
     Route("source", None, "failed over to the source: the replica is 2.0 s behind, more than htap.max_staleness=1 s")),
]


@pytest.mark.parametrize("case,tkw,window,kw,expected", ROUTES, ids=[r[0] for r in ROUTES])
def test_routes_and_reasons(case, tkw, window, kw, expected):
    assert decide(table(**tkw), window, NOW, **kw) == expected


# (case, table kwargs, window, decide kwargs, error message)
ERRORS = [
    ("time travel with route=source", {}, WINDOW, {"mode": ROUTE_SOURCE, "as_of": 60},
     "public.orders: time travel reads the replica, but this catalog routes to the source"),
    ("time travel below the window", {}, WINDOW, {"as_of": 49},
     "public.orders: cannot time travel to seq 49: seq 49 is outside the queryable window [50, 100]"),
    ("time travel above the window", {}, WINDOW, {"as_of": 101, "mode": ROUTE_REPLICA},
     "public.orders: cannot time travel to seq 101: seq 101 is outside the queryable window [50, 100]"),
    ("time travel on a failed-over table", {"failover": True}, WINDOW, {"as_of": 60},
     "public.orders: cannot time travel to seq 60: failover is on for the table"),
    ("time travel on an unreadable table", {"state": STATE_UNHEALTHY, "error": "boom"}, None, {"as_of": 60},
     "public.orders: cannot time travel to seq 60: the replica is unhealthy: boom"),
    ("route=replica, failed over", {"failover": True}, WINDOW, {"mode": ROUTE_REPLICA},
     "public.orders: the catalog requires the replica (route=replica), but failover is on for the table"),
    ("route=replica, stale", {"max_staleness_s": 1}, WINDOW, {"mode": ROUTE_REPLICA},
     "public.orders: the catalog requires the replica (route=replica), but the replica is 2.0 s behind, more than htap.max_staleness=1 s"),
    ("route=replica, unreadable", {"state": STATE_CATCHING_UP}, None, {"mode": ROUTE_REPLICA},
     "public.orders: the catalog requires the replica (route=replica), but the replica is catching_up"),
    ("time travel with an unreachable warehouse", {}, WINDOW, {"as_of": 60, "unavailable": "the store is down"},
     "public.orders: cannot time travel to seq 60: the store is down"),
    ("route=replica, snapshot outside", {}, WINDOW, {"mode": ROUTE_REPLICA, "snapshot": 10},
     "public.orders: the catalog requires the replica (route=replica), but seq 10 is outside the queryable window [50, 100]"),
]


@pytest.mark.parametrize("case,tkw,window,kw,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_and_their_messages(case, tkw, window, kw, message):
    with pytest.raises(RoutingError) as info:
        decide(table(**tkw), window, NOW, **kw)
    assert str(info.value) == message


def test_routing_errors_are_htap_errors():
    assert issubclass(RoutingError, HtapError)


def test_auto_is_the_default_mode():
    t = table(failover=True)
    assert decide(t, WINDOW, NOW) == decide(t, WINDOW, NOW, mode=ROUTE_AUTO)


def test_a_single_seq_window():
    assert decide(table(), Window(7, 7), NOW) == Route("replica", 7, "replica healthy and fresh")
    assert decide(table(), Window(7, 7), NOW, snapshot=8).target == "source"


def test_delay_is_measured_from_the_safe_time_at_the_given_now():
    t = table(max_staleness_s=10, max_safe_time=1_000.0)
    assert decide(t, WINDOW, 1_010.0).target == "replica"
    assert decide(t, WINDOW, 1_010.1).reason == (
        "failed over to the source: the replica is 10.1 s behind, more than htap.max_staleness=10 s"
    )
