"""A logical replication connection that tells the server only the positions we confirm.

Why not psycopg2's `LogicalReplicationConnection`: when a keepalive arrives after the client
confirmed the last data message, psycopg2 moves the flush position it reports to the server's
sent position on its own (`pq_read_replication_message`), and sends it with its next status
update. That position is safe for the server to skip to, but it is not one our metadata store
holds yet: the source was told a position before the store recorded it — the one thing a CDC
client promises never to do, and the service's kill -9 test caught it. Here the flush position
sent is exactly the last `confirm`, nothing else.

The replication sub-protocol (CopyBoth messages, Postgres docs "Streaming Replication
Protocol"): the server sends XLogData ('w': data start, WAL end, send time, payload) and
keepalives ('k': WAL end, send time, reply-requested); the client sends standby status updates
('r': written, flushed and applied positions, clock, reply-requested). libpq through psycopg's
`pq` module does the wire work.
"""

from __future__ import annotations

import select
import struct
import time

from psycopg import conninfo, pq

from htap.errors import SourceError

_XLOG_DATA = 0x77  # 'w'
_KEEPALIVE = 0x6B  # 'k'
_XLOG_HEADER = struct.Struct("!QQQ")  # data start, WAL end, send time (after the tag)
_STATUS = struct.Struct("!cQQQqB")
STATUS_INTERVAL_S = 10.0  # a status update at least this often while reading (as pg_recvlogical)
_PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 in Unix microseconds


class WalError(SourceError):
    """The replication connection failed; `lost` when the connection itself is gone."""

    def __init__(self, message: str, lost: bool = False):
        super().__init__(message)
        self.lost = lost


def _message(pg: pq.PGconn, fallback: str) -> str:
    return pg.get_error_message().strip() or fallback


def _result_error(result: pq.PGresult | None) -> str:
    """The server's error text of a result ('' when there is none)."""
    return result.get_error_message().strip() if result is not None else ""


class WalConnection:
    """One walsender connection (`replication=database`): a few plain commands, then one
    START_REPLICATION whose messages `read` returns one payload at a time."""

    def __init__(self, dsn: str, options: str):
        self.pg = pq.PGconn.connect(conninfo.make_conninfo(dsn, replication="database", options=options).encode())
        if self._broken():
            text = _message(self.pg, "connection refused")
            self.pg.finish()
            raise WalError(text, lost=True)
        self.server_version = self.pg.server_version
        self.wal_end = 0  # the server's sent position, from its last message
        self.flushed = 0  # the position last confirmed (the only flush position ever sent)
        self.last_status = 0.0

    def _broken(self) -> bool:
        return self.pg.status != pq.ConnStatus.OK

    def fileno(self) -> int:
        return self.pg.socket

    def value(self, command: str) -> str | None:
        """The first value a command returns (None for a command without rows)."""
        result = self.pg.exec_(command.encode())
        if result.status == pq.ExecStatus.COMMAND_OK:
            return None
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise WalError(_result_error(result) or f"{command} failed", lost=self._broken())
        raw = result.get_value(0, 0)
        return None if raw is None else bytes(raw).decode()

    def start(self, slot: str, options: dict[str, str], start_lsn: str = "0/0") -> None:
        opts = ", ".join(f'"{k}" \'{v}\'' for k, v in options.items())
        self.pg.send_query(f'START_REPLICATION SLOT "{slot}" LOGICAL {start_lsn} ({opts})'.encode())
        result = self.pg.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            raise WalError(_result_error(result) or _message(self.pg, "START_REPLICATION failed"), lost=self._broken())
        self.pg.nonblocking = 1
        self.last_status = time.monotonic()

    def read(self) -> bytes | None:
        """The payload of the next XLogData message, or None when none has arrived. Keepalives
        are handled here: their WAL end is kept, and a reply they ask for is sent (with the
        last confirmed position)."""
        try:
            while True:
                n, data = self.pg.get_copy_data(1)
                if n == 0:
                    self.pg.consume_input()
                    n, data = self.pg.get_copy_data(1)
                    if n == 0:
                        if time.monotonic() - self.last_status >= STATUS_INTERVAL_S:
                            self._status(reply=False)
                        return None
                if n < 0:
                    self._ended(n)
                tag = data[0]
                if tag == _XLOG_DATA:
                    _start, end, _time = _XLOG_HEADER.unpack_from(data, 1)
                    self.wal_end = max(self.wal_end, end)
                    return bytes(data[1 + _XLOG_HEADER.size:])
                if tag == _KEEPALIVE:
                    (end,) = struct.unpack_from("!Q", data, 1)
                    self.wal_end = max(self.wal_end, end)
                    if data[17]:
                        self._status(reply=False)
                    continue
                raise WalError(f"unknown replication message type {chr(tag)!r}")
        except WalError:
            raise
        except Exception as e:  # psycopg.OperationalError: the connection broke
            raise WalError(f"{e}".strip() or type(e).__name__, lost=True) from e

    def _ended(self, n: int) -> None:
        """The server ended the copy (-1: its error follows as a result) or the connection broke (-2)."""
        if n == -1:
            text = _result_error(self.pg.get_result())
            raise WalError(text or _message(self.pg, "the server ended the replication stream"),
                           lost=self._broken() or not text)
        raise WalError(_message(self.pg, "the replication connection broke"), lost=True)

    def confirm(self, flush_lsn: int) -> None:
        """Tell the server it may forget everything before `flush_lsn` (sent at once)."""
        self.flushed = max(self.flushed, flush_lsn)
        self._status(reply=False)

    def request_reply(self) -> None:
        """Ask the server for a keepalive (it reports its sent position)."""
        self._status(reply=True)

    def _status(self, reply: bool) -> None:
        clock = int(time.time() * 1_000_000) - _PG_EPOCH_US
        message = _STATUS.pack(b"r", self.flushed, self.flushed, 0, clock, 1 if reply else 0)
        try:
            while self.pg.put_copy_data(message) == 0:  # nonblocking: libpq's buffer is full
                select.select([], [self], [], 1.0)
            while self.pg.flush() == 1:  # not all of it sent yet
                select.select([self], [self], [], 1.0)
        except WalError:
            raise
        except Exception as e:
            raise WalError(f"{e}".strip() or type(e).__name__, lost=True) from e
        self.last_status = time.monotonic()

    def close(self) -> None:
        self.pg.finish()
