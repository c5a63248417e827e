"""In-progress transactions that Postgres streams before they commit (pgoutput protocol 2,
`streaming 'on'`).

Without streaming, the server decodes a transaction only after its commit, so a big one reaches
the replica all at once after it committed, and its decoding (the walsender's text output of
every row, after spilling them to disk and reading them back) does not overlap the source's own
work. With streaming, whenever the server's decoding memory (`logical_decoding_work_mem`) fills,
it sends the largest in-progress transaction's changes so far in a stream block (Stream Start,
changes each carrying the xid of their subtransaction, Stream Stop); other transactions' blocks
and whole committed transactions may come between two blocks. A Stream Commit ends the
transaction, a Stream Abort drops it or one of its subtransactions.

`StreamedTxn` keeps one such transaction's decoded events (spilled to a temporary file past a
size) until its Stream Commit, when they become one ordinary transaction (Begin, events, Commit
at its commit LSN) that the applier takes as any other: nothing of it is buffered, visible or
confirmed before its commit, and after a crash the server streams it again from its start (it
keeps the WAL of every transaction that did not commit before the confirmed position).
"""

from __future__ import annotations

from typing import Iterator

from htap.connectors.changes import Event, Relation, RowBatch
from htap.connectors.spool import TxnSpool

SPILL_ROWS = 2_000_000  # row changes of an open transaction kept in memory (the buffer holds them after its commit anyway)


class StreamedTxn:
    """The events of one streamed transaction, in arrival order, each with the xid of its
    subtransaction (see the module docstring)."""

    def __init__(self, xid: int, spill_at: int = SPILL_ROWS):
        self.xid = xid
        self.spool = TxnSpool(spill_at)
        self.first: dict[int, int] = {}  # subtransaction xid -> index of its first event
        self.dropped: list[tuple[int, int]] = []  # [start, end) ranges of event indexes rolled back

    def add(self, subxid: int, events: list[Event]) -> None:
        if subxid != self.xid and subxid not in self.first:
            self.first[subxid] = len(self.spool)
        for event in events:
            self.spool.append(event, len(event) if isinstance(event, RowBatch) else 1)

    def abort_subtransaction(self, subxid: int) -> None:
        """A subtransaction rolled back: drop every event from its first on, as Postgres' own
        apply worker does (while a subtransaction is open every change of the transaction is its
        own or its children's; the server sends a Stream Abort for each subtransaction it
        streamed changes of, before any change after the abort). Relation messages stay: the
        server does not send a table's description again in the same transaction, and an extra
        one at worst has its table checked against the source."""
        start = self.first.get(subxid)
        if start is None:
            return  # none of its changes was streamed
        self.dropped.append((start, len(self.spool)))
        self.first = {x: i for x, i in self.first.items() if i < start}

    def close(self) -> None:
        self.spool.close()

    def events(self) -> Iterator[Event]:
        """The transaction's events that were not rolled back, in order (once)."""
        dropped = sorted(self.dropped)
        for i, event in enumerate(self.spool):
            if dropped and any(a <= i < b for a, b in dropped) and not isinstance(event, Relation):
                continue
            yield event
