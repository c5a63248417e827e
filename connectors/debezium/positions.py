"""Where a Debezium event sits in its source's commit order: its seq (see the package docstring)."""

from __future__ import annotations

import json

from htap.connectors.debezium.envelope import unwrap
from htap.errors import SourceError
from htap.seq import binlog_seq


def event_position(source: dict) -> int:
    """The event's position in its source's commit order (see the module docstring)."""
    connector = source.get("connector")
    if connector == "mysql" or (connector is None and "pos" in source and "file" in source):
        if source.get("file") is None or source.get("pos") is None:
            raise SourceError("Debezium MySQL event without source.file/source.pos: cannot order it")
        return binlog_seq(source["file"], source["pos"])
    lsn = source.get("lsn")
    pos = int(lsn) if lsn is not None else 0
    sequence = source.get("sequence")
    if sequence:
        try:
            last_commit = json.loads(sequence)[0] if isinstance(sequence, str) else sequence[0]
        except (ValueError, IndexError, TypeError):
            last_commit = None
        if last_commit is not None:
            pos = max(pos, int(last_commit))
    if lsn is None and not sequence:
        raise SourceError(f"Debezium {connector or 'unknown'} event without source.lsn: cannot order it")
    return pos


def change_position(value) -> int | None:
    """The position of a record's value when it is a change event; None for anything else
    (tombstones, transaction markers, schema changes, heartbeats)."""
    _schema, payload = unwrap(value)
    if isinstance(payload, dict) and "op" in payload and isinstance(payload.get("source"), dict):
        return event_position(payload["source"])
    return None


def commit_time(payload: dict) -> float:
    ms = (payload.get("source") or {}).get("ts_ms") or payload.get("ts_ms") or 0
    return int(ms) / 1000.0
