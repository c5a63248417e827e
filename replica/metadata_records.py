"""Scan records in the metadata store: each scan's route, seq and pushed plan, what
`<catalog>.htap.tables` and the tests read back."""

from __future__ import annotations

import json
from dataclasses import dataclass

from htap.replica.metadata_db import MetadataDatabase


@dataclass(frozen=True)
class ScanRecord:
    table_id: int
    at: float
    route: str
    seq: int | None
    pushed: dict
    reason: str | None


class ScanRecords(MetadataDatabase):
    """The routing record of every scan."""

    # --- scans ----------------------------------------------------------------------------------

    def record_scan(self, table_id: int, route: str, seq: int | None, pushed: dict, reason: str | None = None) -> None:
        """Remember what a query's scan asked for and how it was routed (shown by status tools)."""
        with self._tx(durable=False):  # status information: losing the last ones in a crash is harmless
            self._x(
                "INSERT INTO scans (table_id, at, route, seq, pushed_json, reason) VALUES (?, ?, ?, ?, ?, ?)",
                (table_id, self.clock(), route, seq, json.dumps(pushed, sort_keys=True), reason),
            )
            self._x(
                "DELETE FROM scans WHERE table_id = ? AND id NOT IN"
                " (SELECT id FROM scans WHERE table_id = ? ORDER BY id DESC LIMIT 100)",
                (table_id, table_id),
            )

    def recent_scans(self, table_id: int, limit: int = 10) -> list[ScanRecord]:
        rows = self._all(
            "SELECT table_id, at, route, seq, pushed_json, reason FROM scans WHERE table_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (table_id, limit),
        )
        return [ScanRecord(t, at, route, seq, json.loads(p), reason) for t, at, route, seq, p, reason in rows]
