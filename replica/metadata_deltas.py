"""Deltas in the metadata store: the files a checkpoint, a copy or a compaction made visible, and
the checkpoint itself — the deltas, every table's new max safe seq and the source's durable
position in one transaction, so a reader never sees a delta without its safe seq (or the
reverse) and a restart resumes exactly after the last durable checkpoint. Compaction replaces a
delta set with one guarded transaction (compare-and-swap on the inputs still being live)."""

from __future__ import annotations

from dataclasses import dataclass

from htap.replica.metadata_db import MetadataDatabase
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_FAILED,
    STATE_STREAMING,
    Delta,
)

# Seq <-> wall clock points: one for every checkpoint that stored changes or truncations (the
# change feed's _commit_timestamp: when its changes became readable), otherwise at most one per
# source per second (time travel; idle sources advance with every heartbeat).
SAFE_POINT_EVERY_S = 1.0


@dataclass(frozen=True)
class NewDelta:
    table_id: int
    path: str
    min_seq: int
    max_seq: int
    rows: int
    bytes: int
    partial_rows: int = 0
    part: int = 0
    deletes: int = 0
    unique_keys: bool = False
    schema_version: int = 1
    checksum: str | None = None  # SHA-256 of the file (htap.replica.warehouse)
    dv_checksum: str | None = None  # of its deletion-vector sidecar; None: no sidecar
    column_stats: str | None = None  # JSON, htap.replica.column_stats.encode; None: not kept


class DeltaRecords(MetadataDatabase):
    """Deltas and checkpoints."""

    # --- checkpoints and safe seqs --------------------------------------------------------------

    def commit_checkpoint(
        self,
        source: str,
        deltas: list[NewDelta],
        safe_seq: int,
        safe_time: float,
        truncations: list[tuple[int, int]] = (),
        failures: list[tuple[int, str]] = (),
    ) -> list[str]:
        """Make a checkpoint durable: its deltas and truncations (table id, seq), the tables that
        failed since the last checkpoint (table id, error), every other table's max safe seq, the
        source position — in one transaction.

        Tables still catching up become readable once the stream has passed their copy seq.
        Deltas of tables removed meanwhile are not recorded: their paths are returned (to delete).
        """
        with self._tx():
            for table_id, error in failures:
                self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_FAILED, error, table_id))
            live = {r[0] for r in self._all("SELECT id FROM tables WHERE source = ?", (source,))}
            orphans = [d.path for d in deltas if d.table_id not in live]
            self._insert_deltas([d for d in deltas if d.table_id in live])
            for table_id, seq in truncations:
                if table_id in live:
                    self._x(
                        "INSERT INTO truncations (table_id, seq) VALUES (?, ?) ON CONFLICT DO NOTHING", (table_id, seq)
                    )
            self._x(
                "UPDATE tables SET state = ? WHERE source = ? AND state = ? AND copy_seq <= ?",
                (STATE_STREAMING, source, STATE_CATCHING_UP, safe_seq),
            )
            self._x(
                "UPDATE tables SET max_safe_seq = ?, max_safe_time = ? WHERE source = ? AND state = ?",
                (safe_seq, safe_time, source, STATE_STREAMING),
            )
            self._x(
                "INSERT INTO sources (name, position, position_time, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
                " position_time = excluded.position_time, updated_at = excluded.updated_at",
                (source, safe_seq, safe_time, self.clock()),
            )
            last = self._one("SELECT max(at) FROM safe_points WHERE source = ?", (source,))[0]
            if last is None or safe_time - last >= SAFE_POINT_EVERY_S or deltas or truncations:
                self._x(
                    "INSERT INTO safe_points (source, seq, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (source, safe_seq, safe_time),
                )
        return orphans

    # --- deltas ---------------------------------------------------------------------------------

    def _insert_deltas(self, deltas: list[NewDelta]) -> None:
        now = self.clock()
        for d in deltas:
            self._x(
                "INSERT INTO deltas (table_id, part, path, min_seq, max_seq, rows, bytes, partial_rows, deletes,"
                " unique_keys, schema_version, created_at, checksum, dv_checksum, column_stats)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (d.table_id, d.part, d.path, d.min_seq, d.max_seq, d.rows, d.bytes, d.partial_rows, d.deletes,
                 int(d.unique_keys), d.schema_version, now, d.checksum, d.dv_checksum, d.column_stats),
            )

    _DELTA_COLUMNS = (
        "id, table_id, part, path, min_seq, max_seq, rows, bytes, partial_rows, deletes, unique_keys, schema_version,"
        " checksum, dv_checksum, until_seq"
    )

    def deltas(self, table_id: int, part: int | None = None) -> list[Delta]:
        """Live deltas of a table (or of one partition), oldest first."""
        if part is None:
            rows = self._all(
                f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND retired_at IS NULL ORDER BY id",
                (table_id,),
            )
        else:
            rows = self._all(
                f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND part = ? AND retired_at IS NULL"
                " ORDER BY id",
                (table_id, part),
            )
        return [Delta(*r) for r in rows]

    def delta_paths(self, table_id: int) -> list[str]:
        """Every delta file the metadata references for the table, live or retired."""
        return [p for (p,) in self._all("SELECT path FROM deltas WHERE table_id = ?", (table_id,))]

    def deltas_at(self, table_id: int, seq: int) -> list[Delta]:
        """The deltas a read at `seq` may need, oldest first: the live ones, and those of
        partitions a repartition retired at a seq above `seq` (reads below it still use them).
        Which partitions a read uses is its layout's business (`layout_at`)."""
        rows = self._all(
            f"SELECT {self._DELTA_COLUMNS} FROM deltas WHERE table_id = ? AND (retired_at IS NULL OR until_seq > ?)"
            " ORDER BY id",
            (table_id, seq),
        )
        return [Delta(*r) for r in rows]

    def replace_deltas(self, table_id: int, old: list[Delta], new: list[NewDelta]) -> bool:
        """Swap a set of live deltas for their compacted replacement, atomically.

        Returns False (and changes nothing) when any input is no longer live: another compaction
        won the race. The inputs are retired, not deleted: pinned readers may still read them.
        """
        with self._tx():
            ids = [d.id for d in old]
            marks = ",".join("?" * len(ids))
            (live,) = self._one(
                f"SELECT count(*) FROM deltas WHERE table_id = ? AND retired_at IS NULL AND id IN ({marks})",
                (table_id, *ids),
            )
            if live != len(ids):
                return False
            self._x(f"UPDATE deltas SET retired_at = ? WHERE id IN ({marks})", (self.clock(), *ids))
            self._insert_deltas(new)
        return True

    def truncated_at(self, table_id: int, seq: int) -> int | None:
        """The latest truncation of the table at or below `seq` (versions below it are gone)."""
        return self._one("SELECT max(seq) FROM truncations WHERE table_id = ? AND seq <= ?", (table_id, seq))[0]

    def truncations_between(self, table_id: int, start: int, end: int) -> set[int]:
        """The seqs of the table's truncations with start < seq <= end (the change feed's)."""
        rows = self._all("SELECT seq FROM truncations WHERE table_id = ? AND seq > ? AND seq <= ?", (table_id, start, end))
        return {r[0] for r in rows}

    def delta_stats(self, table_id: int) -> tuple[int, int, int]:
        """(number of live deltas, row versions, bytes) of a table."""
        n, rows, size = self._one(
            "SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(bytes), 0) FROM deltas"
            " WHERE table_id = ? AND retired_at IS NULL",
            (table_id,),
        )
        return n, rows, size

    def delta_column_stats(self, table_id: int) -> list[tuple[int, str | None]]:
        """(row versions, column statistics JSON or None) of each live delta of a table
        (htap.replica.column_stats)."""
        return [(r, s) for r, s in self._all(
            "SELECT rows, column_stats FROM deltas WHERE table_id = ? AND retired_at IS NULL", (table_id,))]
