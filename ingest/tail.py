"""The service's side of the in-memory tail (htap.replica.tail says what it is for).

Per source, a `TailStore` holds *segments*: the changes of every followed table decoded since the
last one, published by the stream's thread between transactions (so a segment holds whole
transactions only), every TAIL_PUBLISH_S at most, and always right before a checkpoint is drained
(so segment ends fall on checkpoint ends). The newest segment's end is the source's *visible*
seq. Once a checkpoint's metadata transaction has committed, the segments it made durable are
dropped: a query planned after that reads them from the deltas. A query pins the segments it
needs when it is planned (a ticket, released by the driver or ending with its ttl), so its
tasks read the same rows whatever checkpoints happen meanwhile.

A table's tail stops being readable at the first change the read side would need more than the
rows for (a truncation, a schema change, a partial row that moved keys: htap.ingest.buffer) until
the checkpoint that holds it: queries then read at most up to the seq before it.

`TailServer` serves the stores over Arrow Flight (pyarrow.flight): action `pin`, action `release`,
and `do_get` of one partition's rows of one pinned table. Every call carries the shared secret.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import flight

from htap.replica.models import SEQ
from htap.replica.partitions import decode_bounds, partition_filter
from htap.replica.tail import PIN_ACTION, RELEASE_ACTION, RENEW_ACTION, STATUS_ACTION, TAIL_HEADER

log = logging.getLogger(__name__)

TAIL_PUBLISH_S = 0.01  # at most this long between a transaction's commit and its visibility


@dataclass(frozen=True)
class Segment:
    """The changes of transactions with `low < seq <= high`: per table id, its rows (table
    columns, _seq, _op, _unset, _ord); `ok`: the followed tables whose tail is whole through
    `high` (a table without rows in it too)."""

    low: int
    high: int
    parts: dict[int, pa.Table]
    ok: frozenset[int]
    nbytes: int = 0  # of `parts`, counted once (Arrow's count walks every buffer)


@dataclass
class _Pin:
    expires_at: float
    segments: tuple[Segment, ...]
    durable: int
    limits: dict[int, int]


@dataclass
class TailStore:
    """One source's tail (see the module docstring). Thread-safe: the stream's thread publishes
    and drops, the Flight server's threads pin and read."""

    source: str
    max_bytes: int
    clock: Callable[[], float] = time.monotonic
    durable: int = 0
    visible: int = 0
    segments: list[Segment] = field(default_factory=list)
    followed: frozenset[int] = frozenset()  # the tables the stream follows, as of the last publish
    pins: dict[str, _Pin] = field(default_factory=dict)
    _own_bytes: int = 0  # of `segments`
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def restart(self, durable: int) -> None:
        """A new stream starts at the durable position: what was held is gone (pins keep theirs)."""
        with self._lock:
            self.durable = self.visible = durable
            self.segments = []
            self._own_bytes = 0

    def _held_bytes(self) -> int:
        """Bytes of every segment held, by the store or a pin (each counted once)."""
        seen = {id(s): s for s in self.segments}
        for p in self.pins.values():
            seen.update((id(s), s) for s in p.segments)
        return sum(s.nbytes for s in seen.values())

    def over_limit(self) -> bool:
        """The store's own segments (not yet durable) reach `max_bytes`: time to checkpoint early.
        Called between every two transactions: a sum kept as segments come and go."""
        return self._own_bytes >= self.max_bytes

    def full(self) -> bool:
        """Past `max_bytes`: publish nothing more until a checkpoint (or an ended pin) frees some."""
        with self._lock:
            return self._held_bytes() >= self.max_bytes

    def publish(self, high: int, parts: dict[int, pa.Table], ok: set[int], followed: set[int]) -> None:
        """Every transaction up to `high` has been applied: `parts` are the rows buffered since
        the last publish, `ok` the `followed` tables whose tail is whole through `high`."""
        nbytes = sum(t.get_total_buffer_size() for t in parts.values())  # outside the lock: readers wait on it
        with self._lock:
            self.followed = frozenset(followed)
            if high <= self.visible and not parts:
                return
            segment = Segment(self.visible, high, parts, frozenset(ok), nbytes)
            self.segments.append(segment)
            self._own_bytes += segment.nbytes
            self.visible = max(self.visible, high)

    def checkpointed(self, safe: int) -> None:
        """A checkpoint holding everything up to `safe` has committed: its segments are dropped."""
        with self._lock:
            self.durable = max(self.durable, safe)
            self.visible = max(self.visible, safe)
            self.segments = [s for s in self.segments if s.high > safe]
            self._own_bytes = sum(s.nbytes for s in self.segments)
            self._expire()

    def _limits(self, held: tuple[Segment, ...], table_ids: list[int]) -> dict[int, int]:
        """Per followed table of `table_ids`: the newest seq its tail in `held` is whole up to
        (the seq before its first segment that is not whole, or the last segment's end)."""
        limits = {}
        for t in table_ids:
            if t not in self.followed:
                continue
            limit = held[0].low if held else self.visible
            for s in held:
                if t not in s.ok:
                    break
                limit = s.high
            limits[t] = limit
        return limits

    def pin(self, table_ids: list[int], ttl_s: float) -> dict:
        """Hold what a query needs of `table_ids`: every segment above the durable seq."""
        with self._lock:
            self._expire()
            held = tuple(self.segments)
            durable = held[0].low if held else self.visible
            limits = self._limits(held, table_ids)
            ticket = uuid.uuid4().hex
            self.pins[ticket] = _Pin(self.clock() + ttl_s, held, durable, limits)
        return {"ticket": ticket, "durable": durable, "visible": self.visible, "limits": limits}

    def status(self) -> dict:
        """What operations show: durable and visible seqs, bytes held, live pins."""
        with self._lock:
            self._expire()
            limits = self._limits(tuple(self.segments), sorted(self.followed))
            return {"durable": self.durable, "visible": self.visible, "bytes": self._held_bytes(),
                    "pins": len(self.pins), "tables": {str(t): v for t, v in limits.items()}}

    def release(self, ticket: str) -> None:
        with self._lock:
            self.pins.pop(ticket, None)

    def renew(self, ticket: str, ttl_s: float) -> None:
        with self._lock:
            pinned = self.pins.get(ticket)
            if pinned is not None:
                pinned.expires_at = max(pinned.expires_at, self.clock() + ttl_s)

    def rows(self, ticket: str, table_id: int, low: int, high: int, key0: str, bounds_b64: str | None,
             index: int) -> pa.Table | None:
        """One partition's rows of a pinned table with `low < _seq <= high`; None for an
        unknown or ended pin."""
        with self._lock:
            self._expire()
            pinned = self.pins.get(ticket)
        if pinned is None:
            return None
        if table_id in pinned.limits and high > pinned.limits[table_id]:
            raise ValueError(f"table {table_id}'s tail is whole only up to seq {pinned.limits[table_id]}, not {high}")
        parts = [s.parts[table_id] for s in pinned.segments if table_id in s.parts and s.high > low and s.low < high]
        if not parts:
            return pa.table({})  # nothing of this table in the range
        rows = pa.concat_tables(parts, promote_options="none")
        seqs = rows.column(SEQ)
        rows = rows.filter(pc.and_(pc.greater(seqs, low), pc.less_equal(seqs, high)))
        where = partition_filter(key0, decode_bounds(bounds_b64), index)
        return rows if where is None else rows.filter(where)

    def _expire(self) -> None:
        now = self.clock()
        for ticket in [t for t, p in self.pins.items() if p.expires_at <= now]:
            del self.pins[ticket]


class _SecretCheck(flight.ServerMiddlewareFactory):
    def __init__(self, secret: str):
        self.secret = secret.encode()

    def start_call(self, info, headers):
        given = (headers.get(TAIL_HEADER) or [""])[0]
        if not hmac.compare_digest(given.encode() if isinstance(given, str) else given, self.secret):
            raise flight.FlightUnauthenticatedError(f"wrong or missing {TAIL_HEADER} header")


class TailServer(flight.FlightServerBase):
    """Arrow Flight over the sources' tails (see the module docstring)."""

    def __init__(self, address: str, secret: str, stores: dict[str, TailStore]):
        super().__init__(f"grpc://{address}", middleware={"secret": _SecretCheck(secret)})
        self.stores = stores

    def do_action(self, context, action):
        body = action.body.to_pybytes()
        if action.type == PIN_ACTION:
            ask = json.loads(body)
            store = self.stores.get(ask["source"])
            if store is None:
                raise flight.FlightServerError(f"this service does not stream source {ask['source']!r}")
            pinned = store.pin([int(t) for t in ask["tables"]], float(ask["ttl_s"]))
            return [flight.Result(json.dumps(pinned).encode())]
        if action.type == STATUS_ACTION:
            return [flight.Result(json.dumps({name: store.status() for name, store in self.stores.items()}).encode())]
        if action.type in (RELEASE_ACTION, RENEW_ACTION):
            ask = json.loads(body)
            for store in self.stores.values():
                for ticket in ask["tickets"]:
                    if action.type == RELEASE_ACTION:
                        store.release(ticket)
                    else:
                        store.renew(ticket, float(ask["ttl_s"]))
            return []
        raise flight.FlightServerError(f"unknown action {action.type!r}")

    def do_get(self, context, ticket):
        ask = json.loads(ticket.ticket)
        for store in self.stores.values():
            rows = store.rows(ask["ticket"], int(ask["table"]), int(ask["low"]), int(ask["high"]), ask["key0"],
                              ask["bounds"], int(ask["index"]))
            if rows is not None:
                return flight.RecordBatchStream(rows)
        raise flight.FlightServerError(
            f"no tail pin {ask['ticket']} here (the service restarted, or the pin ended)")


@dataclass
class Tails:
    """The service's tails: one store per source, and the server when it runs."""

    max_bytes: int
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    stores: dict[str, TailStore] = field(default_factory=dict)
    server: TailServer | None = None
    endpoint: str | None = None

    def store(self, source: str) -> TailStore:
        if source not in self.stores:
            self.stores[source] = TailStore(source, self.max_bytes)
        return self.stores[source]

    def serve(self, address: str) -> str:
        """Start the Flight server at `address` (host:port, port 0: a free one); its endpoint."""
        self.server = TailServer(address, self.secret, self.stores)
        host = address.rpartition(":")[0].strip("[]") or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            import socket

            host = socket.getfqdn()
        self.endpoint = f"grpc://{host}:{self.server.port}"
        # Serving from construction on. Never `serve()`: it installs gRPC's SIGTERM/SIGINT handlers
        # over the service's own, and a stop would end only the tail server.
        log.info("serving the in-memory tail at %s", self.endpoint)
        return self.endpoint

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
