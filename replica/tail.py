"""The in-memory tail: changes the service has decoded but not yet checkpointed, readable by queries.

A checkpoint (sort, Parquet, fsync or upload, metadata commit) takes 0.1-0.5 s, and a change is
durable — and, without the tail, readable — only once its checkpoint has landed. The service
also keeps each followed table's changes since its last checkpoint in memory as Arrow, whole
transactions only, up to its *visible* seq (htap.ingest.tail), and serves them over Arrow Flight.
A query that asks for it (`spark.htap.readTail`) pins the tail when it is planned; its snapshot
is then the visible seq, and each partition read merges the durable deltas (at the durable seq
the planner saw) with the pinned tail rows above that seq, as the newest delta: the same
collapse (latest wins, deletes hide, partial rows fill from older versions). Nothing about
durability changes: the tail is a cache of what the next checkpoint makes durable.

This module is what both sides share: the pin and the per-partition read as typed values, and
the client calls (pin, release, fetch). The service side is htap.ingest.tail.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pyarrow as pa

from htap.errors import ReplicaError

log = logging.getLogger(__name__)

TAIL_HEADER = "htap-tail-secret"  # the shared secret, as a gRPC header of every call
PIN_ACTION = "pin"
RELEASE_ACTION = "release"
RENEW_ACTION = "renew"
STATUS_ACTION = "status"


class TailUnavailable(ReplicaError):
    """The service's tail cannot be read (unreachable, restarted, or the pin expired)."""


@dataclass(frozen=True)
class TailPin:
    """What a query pinned of one source's tail when it was planned: the service holds every
    change of `tables` above `durable` up to `visible` for it until released or `ttl_s` passed.
    `limits`: per table id, the newest seq its tail is whole up to (a table whose tail holds a
    truncation, a schema change or a moved partial row since the last checkpoint stops at the
    seq before it; one the service does not follow is absent)."""

    endpoint: str
    secret: str = field(repr=False)
    ticket: str
    durable: int
    visible: int
    limits: dict[int, int]

    def snapshot(self, table_ids: list[int]) -> int:
        """The newest seq every one of the tables can be read at through this pin (its
        `durable` when some table is not served)."""
        if not table_ids or any(t not in self.limits for t in table_ids):
            return self.durable
        return min(self.limits[t] for t in table_ids)

    def to_json(self) -> str:
        return json.dumps({"endpoint": self.endpoint, "secret": self.secret, "ticket": self.ticket,
                           "durable": self.durable, "visible": self.visible,
                           "limits": {str(k): v for k, v in self.limits.items()}})

    @classmethod
    def from_json(cls, text: str) -> TailPin:
        d = json.loads(text)
        return cls(d["endpoint"], d["secret"], d["ticket"], int(d["durable"]), int(d["visible"]),
                   {int(k): int(v) for k, v in d["limits"].items()})


@dataclass(frozen=True)
class TailRead:
    """One partition's part of the tail in a read: the changes of `table_id` with
    `low < _seq <= high` in partition `index` of the layout `bounds_b64` (rows the read's
    deltas, read at `low`, do not hold)."""

    endpoint: str
    secret: str = field(repr=False)
    ticket: str
    table_id: int
    low: int
    high: int
    key0: str
    bounds_b64: str | None
    index: int


@dataclass(frozen=True)
class Connection:
    """A Flight client of one service's tail and the call options carrying the secret; keep one
    to ask many times (a new channel per call costs the service a connection each)."""

    client: object
    options: object
    endpoint: str


def connect(endpoint: str, secret: str) -> Connection:
    from pyarrow import flight

    return Connection(flight.FlightClient(endpoint), flight.FlightCallOptions(
        headers=[(TAIL_HEADER.encode(), secret.encode())], timeout=10.0), endpoint)


def _act(connection: Connection, action: str, body: bytes) -> bytes | None:
    """One action's answer (None for an action that answers nothing); TailUnavailable when the
    service cannot be asked."""
    from pyarrow import flight

    try:
        results = list(connection.client.do_action(flight.Action(action, body), connection.options))
    except (flight.FlightError, OSError, ValueError) as e:
        raise TailUnavailable(f"the service's tail at {connection.endpoint} cannot be asked to {action}: "
                              f"{_first_line(e)}") from e
    return results[0].body.to_pybytes() if results else None


def _once(endpoint: str, secret: str, action: str, body: bytes) -> bytes | None:
    connection = connect(endpoint, secret)
    with connection.client:
        return _act(connection, action, body)


def pin(endpoint: str, secret: str, source: str, table_ids: list[int], ttl_s: float) -> TailPin:
    """Pin the tail of `table_ids` of `source` (TailUnavailable if the service cannot be asked)."""
    body = json.dumps({"source": source, "tables": table_ids, "ttl_s": ttl_s}).encode()
    d = json.loads(_once(endpoint, secret, PIN_ACTION, body))
    return TailPin(endpoint, secret, d["ticket"], int(d["durable"]), int(d["visible"]),
                   {int(k): int(v) for k, v in d["limits"].items()})


def status(connection: Connection) -> dict[str, dict]:
    """Per source the service streams: its durable and visible seqs, the tail's bytes and live pins,
    and per followed table id (`tables`, keys as text) the newest seq its tail is whole up to."""
    return json.loads(_act(connection, STATUS_ACTION, b""))


def statuses(sources: list[str], beats: list[dict], now: float, configured_secret: str = "") -> dict[str, dict]:
    """Per source of `sources`, what its running service's tail holds (`status`), for operations
    (`htap status`, the system tables); nothing for a source without one, or whose service
    cannot be asked (said in the log: operations show the rest)."""
    out: dict[str, dict] = {}
    for name in sources:
        found = service_tail(beats, name, now, configured_secret)
        if found is None or name in out:
            continue
        try:
            connection = connect(*found)
            with connection.client:
                out.update(status(connection))
        except TailUnavailable as e:
            log.warning("%s", e)
    return out


def service_tail(beats: list[dict], source: str, now: float, configured_secret: str = "") -> tuple[str, str] | None:
    """(endpoint, secret) of the running service that streams `source` with a tail, from the
    services' heartbeats (MetadataStore.service_beats, newest first), or None."""
    from htap.replica.metadata import SERVICE_BEAT_S

    for b in beats:
        if source in b.get("sources", ()) and b.get("tail") and b["beat_at"] > now - 3 * SERVICE_BEAT_S:
            return b["tail"]["endpoint"], configured_secret or b["tail"].get("secret", "")
    return None


def release(pins: list[TailPin]) -> None:
    """Let the service forget pins (their query ended; best effort: an unreleased pin ends with
    its ttl)."""
    _tell(pins, RELEASE_ACTION, {}, "release")


def renew(pins: list[TailPin], ttl_s: float) -> None:
    """Keep pins at least `ttl_s` longer (their query still runs; best effort, like leases)."""
    _tell(pins, RENEW_ACTION, {"ttl_s": ttl_s}, "renew")


def _tell(pins: list[TailPin], action: str, extra: dict, what: str) -> None:
    by_endpoint: dict[tuple[str, str], list[str]] = {}
    for p in pins:
        by_endpoint.setdefault((p.endpoint, p.secret), []).append(p.ticket)
    for (endpoint, secret), tickets in by_endpoint.items():
        try:
            _once(endpoint, secret, action, json.dumps({"tickets": tickets, **extra}).encode())
        except TailUnavailable as e:
            log.info("could not %s %d tail pin(s) (they end with their ttl): %s", what, len(tickets), e)


def fetch(read: TailRead) -> pa.Table:
    """The tail rows of one partition read: table columns, _seq, _op, _unset and _ord (the order
    of versions within one transaction). TailUnavailable when the service no longer holds them
    (it restarted, or the pin ended): the read must not go on without them."""
    from pyarrow import flight

    ticket = json.dumps({"ticket": read.ticket, "table": read.table_id, "low": read.low, "high": read.high,
                         "key0": read.key0, "bounds": read.bounds_b64, "index": read.index}).encode()
    try:
        connection = connect(read.endpoint, read.secret)
        with connection.client:
            return connection.client.do_get(flight.Ticket(ticket), connection.options).read_all()
    except (flight.FlightError, OSError) as e:
        raise TailUnavailable(
            f"the in-memory tail this query was planned with (changes {read.low} < seq <= {read.high}) cannot be read"
            f" from the service at {read.endpoint}: {_first_line(e)}; re-run the query (it is planned again, at the"
            f" durable snapshot if the service is still away), or turn spark.htap.readTail off"
        ) from e


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
