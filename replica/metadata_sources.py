"""Sources in the metadata store: each source's durable CDC position and its seq <-> wall-clock
points, the running services' heartbeats, and a source's metadata dumped to and restored from
the warehouse's manifests (htap.replica.manifest)."""

from __future__ import annotations

import json

from htap.replica.metadata_db import MetadataDatabase

# `htap serve` writes a heartbeat this often; one older than SERVICE_STALE_S is a service that
# stopped without saying so (killed, host down).
SERVICE_BEAT_S = 5.0
SERVICE_STALE_S = 30.0


def running_services(beats: list[dict], now: float) -> list[dict]:
    """The services whose heartbeat (MetadataStore.service_beats) is recent enough to be running."""
    return [b for b in beats if now - b["beat_at"] <= SERVICE_STALE_S]


class SourceRecords(MetadataDatabase):
    """Positions, safe points, services, dump and restore."""

    # --- manifests (htap.replica.manifest) -----------------------------------------------------

    # What a manifest keeps of each table, as rows by column name: enough to rebuild the store.
    _DUMPED = {
        "sources": ("name", "position", "position_time", "updated_at"),
        "tables": ("id", "source", "schema_name", "table_name", "columns_json", "key_json", "arrow_schema", "state",
                   "copy_seq", "max_safe_seq", "max_safe_time", "error", "partition_bounds", "failover",
                   "max_staleness_s", "schema_version", "partition_ids", "created_at", "kind"),
        "deltas": ("id", "table_id", "part", "path", "min_seq", "max_seq", "rows", "bytes", "partial_rows", "deletes",
                   "unique_keys", "schema_version", "created_at", "checksum", "dv_checksum", "retired_at", "until_seq",
                   "column_stats"),
        "layouts": ("table_id", "from_seq", "bounds", "ids", "created_at", "reason"),
        "truncations": ("table_id", "seq"),
        "views": ("table_id", "base_id", "sql", "definition", "created_at"),
    }

    def dump_source(self, source: str) -> dict[str, list[dict]]:
        """One source's sources row, tables, partition layouts, the deltas reads may use (live
        ones, and those a repartition retired for reads below its seq) and truncations, read in
        one transaction (a consistent state: the position never lags the deltas it covers)."""
        mine = "table_id IN (SELECT id FROM tables WHERE source = ?)"
        where = {
            "sources": ("name = ?", (source,)),
            "tables": ("source = ?", (source,)),
            "deltas": (f"(retired_at IS NULL OR until_seq IS NOT NULL) AND {mine}", (source,)),
            "layouts": (mine, (source,)),
            "truncations": (mine, (source,)),
            "views": (mine, (source,)),
        }
        out = {}
        with self._tx():
            for name, columns in self._DUMPED.items():
                condition, params = where[name]
                rows = self._all(f"SELECT {', '.join(columns)} FROM {name} WHERE {condition}", params)
                out[name] = [dict(zip(columns, r)) for r in rows]
        return out

    def restore_source(self, dump: dict[str, list[dict]], floor: tuple[int, float] | None = None) -> None:
        """Insert a dumped source (ids kept: delta paths name their table's id) in one transaction;
        the store must not know the source yet. Its safe points: the recorded position, and
        `floor` (seq, time), which keeps the queryable window's low end at or above that seq."""
        with self._tx():
            if floor is not None:
                self._x("INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                        (dump["sources"][0]["name"], floor[0], floor[1]))
            for name, columns in self._DUMPED.items():
                for row in dump.get(name, []):
                    present = [c for c in columns if c in row]
                    extra = ", created_at" if name == "deltas" and "created_at" not in row else ""
                    values = [row[c] for c in present] + ([self.clock()] if extra else [])
                    self._x(f"INSERT INTO {name} ({', '.join(present)}{extra}) VALUES"
                            f" ({', '.join('?' for _ in values)})", values)
            for row in dump.get("sources", []):
                if row.get("position") is not None and row.get("position_time") is not None:
                    self._x("INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                            (row["name"], row["position"], row["position_time"]))
            if self.on_postgres:  # explicit ids: move the sequences past them
                for name in ("tables", "deltas"):
                    self._x(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'),"
                            f" greatest((SELECT max(id) FROM {name}), 1))")

    def source_position(self, source: str) -> int | None:
        row = self._one("SELECT position FROM sources WHERE name = ?", (source,))
        return None if row is None else row[0]

    # --- the running services (`htap serve`): a heartbeat row each in `meta` ---------------------

    SERVICE_KEY = "service:"

    def beat_service(self, service_id: str, info: dict) -> None:
        """Record that service `service_id` (host:pid) runs, now (`htap status` tells a stopped
        service by its missing or old heartbeat). Not durable: a crash may forget one beat."""
        value = json.dumps({**info, "beat_at": self.clock()})
        with self._tx(durable=False):
            self._x("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (self.SERVICE_KEY + service_id, value))

    def end_service(self, service_id: str) -> None:
        """A service stopped cleanly: its heartbeat row goes."""
        with self._tx():
            self._x("DELETE FROM meta WHERE key = ?", (self.SERVICE_KEY + service_id,))

    def service_beats(self) -> list[dict]:
        """Every service's last heartbeat: {"id", "beat_at", ...what it recorded}, newest first."""
        rows = self._all("SELECT key, value FROM meta WHERE key LIKE ?", (self.SERVICE_KEY + "%",))
        beats = [{"id": key[len(self.SERVICE_KEY):], **json.loads(value)} for key, value in rows]
        return sorted(beats, key=lambda b: -b["beat_at"])

    def source_position_time(self, source: str) -> float | None:
        row = self._one("SELECT position_time FROM sources WHERE name = ?", (source,))
        return None if row is None else row[0]

    def seq_at(self, source: str, at: float) -> int | None:
        """The newest safe seq the source had reached at wall clock `at` (None if none yet)."""
        row = self._one("SELECT max(seq) FROM safe_points WHERE source = ? AND at <= ?", (source, at))
        return row[0]

    def settled_seq_at(self, source: str, at: float) -> int | None:
        """`seq_at(source, at)` once no later checkpoint can change it — a safe point was recorded
        after `at` — else None: a `TIMESTAMP AS OF` now or in the future reads a newer seq each
        time it is resolved."""
        row = self._one(
            "SELECT max(seq) FROM safe_points WHERE source = ? AND at <= ?"
            " AND EXISTS (SELECT 1 FROM safe_points WHERE source = ? AND at > ?)", (source, at, source, at))
        return row[0]

    def time_of(self, source: str, seq: int) -> float | None:
        """The wall clock at which the source's safe seq first reached `seq`."""
        row = self._one("SELECT min(at) FROM safe_points WHERE source = ? AND seq >= ?", (source, seq))
        return row[0]

    def safe_points_between(self, source: str, low: int, high: int) -> list[tuple[int, float]]:
        """(seq, wall clock) of the source's safe points from `low` to the first at or past
        `high`, in seq order: every checkpoint that stored changes records one, so the first
        point at or past a change's seq is when that change became readable."""
        last = self._one("SELECT min(seq) FROM safe_points WHERE source = ? AND seq >= ?", (source, high))[0]
        rows = self._all(
            "SELECT seq, at FROM safe_points WHERE source = ? AND seq >= ? AND seq <= ? ORDER BY seq",
            (source, low, high if last is None else last),
        )
        return [(int(s), float(a)) for s, a in rows]

    def forget_safe_points(self, source: str, before: float) -> None:
        with self._tx():
            self._x("DELETE FROM safe_points WHERE source = ? AND at < ?", (source, before))
