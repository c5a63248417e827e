"""HTAP tables and their partition layouts in the metadata store: a table's definition, state,
copy and failover settings; the key ranges it is split into at each seq."""

from __future__ import annotations

import dataclasses
import json

from htap.errors import NoSuchTableError, TableError
from htap.replica.metadata_db import MetadataDatabase
from htap.replica.metadata_deltas import NewDelta
from htap.replica.models import (
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    KIND_TABLE,
    STATE_PENDING,
    VIEWS_SCHEMA,
    Column,
    Delta,
    Layout,
    TableInfo,
)


def columns_json(columns: list[Column]) -> str:
    return json.dumps([[c.name, c.source_type, c.nullable, c.added_version, c.override] for c in columns])


class TableRecords(MetadataDatabase):
    """Tables and their partition layouts."""

    # --- tables -------------------------------------------------------------------------------

    _TABLE_COLUMNS = (
        "id, source, schema_name, table_name, columns_json, key_json, arrow_schema, state, copy_seq,"
        " max_safe_seq, max_safe_time, error, partition_bounds, failover, max_staleness_s, schema_version,"
        " partition_ids, kind"
    )

    def add_table(
        self, source: str, schema: str, name: str, columns: list[Column], key: list[str], arrow_schema: str
    ) -> TableInfo:
        if schema.lower() == VIEWS_SCHEMA:
            raise TableError(f"{schema}.{name}: the schema name {VIEWS_SCHEMA!r} is where spark-htap names derived views"
                             f" (<catalog>.{VIEWS_SCHEMA}.<name>), so a table in a source schema of that name cannot be"
                             " an HTAP table: move it to another schema")
        with self._tx():
            if self._one(
                "SELECT 1 FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?", (source, schema, name)
            ):
                raise TableError(f"{schema}.{name} is already an HTAP table of source {source!r}")
            self._x(
                "INSERT INTO tables (source, schema_name, table_name, columns_json, key_json, arrow_schema,"
                " state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    source,
                    schema,
                    name,
                    columns_json(columns),
                    json.dumps(key),
                    arrow_schema,
                    STATE_PENDING,
                    self.clock(),
                ),
            )
        return self.get_table(source, schema, name)

    def get_table(self, source: str, schema: str, name: str) -> TableInfo:
        row = self._one(
            f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?",
            (source, schema, name),
        )
        if row is None:
            known = ", ".join(t.qualified_name for t in self.list_tables(source)) or "none"
            raise NoSuchTableError(
                f"{schema}.{name} is not an HTAP table of source {source!r} (HTAP tables: {known}); "
                f"add it with `htap tables add {schema}.{name}`"
            )
        return self._table(row)

    def table_by_id(self, table_id: int) -> TableInfo:
        row = self._one(f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE id = ?", (table_id,))
        if row is None:
            raise NoSuchTableError(f"no HTAP table with id {table_id}")
        return self._table(row)

    def list_tables(self, source: str | None = None, views: bool = False) -> list[TableInfo]:
        """The source's (or every source's) tables; with `views`, its derived views too (a view
        is never copied or streamed from the source: ingest lists tables only)."""
        kinds = "" if views else f" AND kind = '{KIND_TABLE}'"
        if source is None:
            rows = self._all(f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE true{kinds} ORDER BY id")
        else:
            rows = self._all(f"SELECT {self._TABLE_COLUMNS} FROM tables WHERE source = ?{kinds} ORDER BY id", (source,))
        return [self._table(r) for r in rows]

    @staticmethod
    def _table(r: tuple) -> TableInfo:
        return TableInfo(
            id=r[0],
            source=r[1],
            schema=r[2],
            name=r[3],
            columns=tuple(Column(*c[:3], *c[3:]) for c in json.loads(r[4])),
            key=tuple(json.loads(r[5])),
            arrow_schema_b64=r[6],
            state=r[7],
            copy_seq=r[8],
            max_safe_seq=r[9],
            max_safe_time=r[10],
            error=r[11],
            partition_bounds_b64=r[12],
            failover=bool(r[13]),
            max_staleness_s=r[14],
            schema_version=r[15],
            partition_ids=None if r[16] is None else tuple(json.loads(r[16])),
            kind=r[17],
        )

    def set_state(self, table_id: int, state: str, error: str | None = None) -> None:
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (state, error, table_id))

    def alter_schema(self, table_id: int, columns: list[Column], arrow_schema: str, version: int) -> None:
        """A new logical schema (metadata only: deltas keep their physical columns)."""
        with self._tx():
            self._x(
                "UPDATE tables SET columns_json = ?, arrow_schema = ?, schema_version = ? WHERE id = ?",
                (columns_json(columns), arrow_schema, version, table_id),
            )

    def redefine(self, table_id: int, columns: list[Column], key: list[str], arrow_schema: str) -> None:
        """Start the table's schema history over (before a fresh copy, which leaves no deltas)."""
        with self._tx():
            self._x(
                "UPDATE tables SET columns_json = ?, key_json = ?, arrow_schema = ?, schema_version = 1 WHERE id = ?",
                (columns_json([dataclasses.replace(c, added_version=1) for c in columns]), json.dumps(list(key)),
                 arrow_schema, table_id),
            )

    def resync(self, table_id: int, reason: str, columns: list[Column] | None = None) -> None:
        """Have the service copy the table again (a change the replica cannot follow in place,
        or a failed table after its cause was fixed); `columns`: new column choices (overrides)."""
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_PENDING, reason, table_id))
            if columns is not None:
                self._x("UPDATE tables SET columns_json = ? WHERE id = ?", (columns_json(columns), table_id))

    def fail_table(self, table_id: int, error: str) -> None:
        """The table cannot be followed any more (see STATE_FAILED); `error` says why and what to do."""
        with self._tx():
            self._x("UPDATE tables SET state = ?, error = ? WHERE id = ?", (STATE_FAILED, error, table_id))

    def remove_table(self, table_id: int) -> None:
        """Forget an HTAP table (or a view): its row, deltas, truncations, pins and scans (the
        caller deletes its files). A table that views aggregate is refused: drop them first."""
        with self._tx():
            views = self._all("SELECT t.table_name FROM views v JOIN tables t ON t.id = v.table_id WHERE v.base_id = ?",
                              (table_id,))
            if views:
                raise TableError(f"views {', '.join(sorted(r[0] for r in views))} aggregate this table: drop them first")
            for table, column in (("deltas", "table_id"), ("truncations", "table_id"), ("pins", "table_id"),
                                  ("scans", "table_id"), ("layouts", "table_id"), ("views", "table_id"),
                                  ("tables", "id")):
                self._x(f"DELETE FROM {table} WHERE {column} = ?", (table_id,))

    def forget_source(self, source: str) -> None:
        """Forget a source's position and safe points (its tables are removed one by one first)."""
        with self._tx():
            self._x("DELETE FROM sources WHERE name = ?", (source,))
            self._x("DELETE FROM safe_points WHERE source = ?", (source,))
            self._x("DELETE FROM query_snapshots WHERE source = ?", (source,))
            self._x("DELETE FROM query_tails WHERE source = ?", (source,))

    def set_failover(self, table_id: int, on: bool) -> None:
        with self._tx():
            self._x("UPDATE tables SET failover = ? WHERE id = ?", (1 if on else 0, table_id))

    def set_max_staleness(self, table_id: int, seconds: float | None) -> None:
        with self._tx():
            self._x("UPDATE tables SET max_staleness_s = ? WHERE id = ?", (seconds, table_id))

    def start_copy(self, table_id: int) -> list[str]:
        """Mark a table as copying and forget any deltas of an earlier, interrupted copy.

        Returns the paths of the forgotten delta files so the caller can delete them.
        """
        with self._tx():
            paths = [p for (p,) in self._all("SELECT path FROM deltas WHERE table_id = ?", (table_id,))]
            self._x("DELETE FROM deltas WHERE table_id = ?", (table_id,))
            self._x("DELETE FROM truncations WHERE table_id = ?", (table_id,))
            self._x("DELETE FROM layouts WHERE table_id = ?", (table_id,))
            self._x(
                "UPDATE tables SET state = ?, copy_seq = NULL, max_safe_seq = NULL, max_safe_time = NULL,"
                " error = NULL, partition_bounds = NULL, partition_ids = NULL WHERE id = ?",
                (STATE_COPYING, table_id),
            )
        return paths

    def finish_copy(self, table_id: int, deltas: list[NewDelta], copy_seq: int, partition_bounds: str | None) -> None:
        """The initial copy is durable: its deltas, partitions and seq become visible together."""
        with self._tx():
            self._insert_deltas(deltas)
            cur = self._x(
                "UPDATE tables SET state = ?, copy_seq = ?, partition_bounds = ?, partition_ids = NULL"
                " WHERE id = ? AND state = ?",
                (STATE_CATCHING_UP, copy_seq, partition_bounds, table_id, STATE_COPYING),
            )
            if cur.rowcount:
                layout = Layout.of(partition_bounds, None)
                self._x(
                    "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (table_id, from_seq) DO UPDATE SET bounds = excluded.bounds, ids = excluded.ids",
                    (table_id, copy_seq, partition_bounds, json.dumps(list(layout.ids)), self.clock(), "initial copy"),
                )

    # --- partition layouts --------------------------------------------------------------------

    def layout_at(self, table_id: int, seq: int) -> Layout:
        """The partition layout reads at `seq` use: the newest that holds from `seq` or before
        (the oldest there is for a seq before all of them)."""
        row = self._one(
            "SELECT bounds, ids, from_seq FROM layouts WHERE table_id = ? AND from_seq <= ? ORDER BY from_seq DESC LIMIT 1",
            (table_id, seq),
        ) or self._one("SELECT bounds, ids, from_seq FROM layouts WHERE table_id = ? ORDER BY from_seq LIMIT 1", (table_id,))
        if row is None:  # a table copied by hand (tests) without a layout row: its current one
            return self.table_by_id(table_id).layout
        return Layout(row[0], tuple(json.loads(row[1])), row[2])

    def layouts(self, table_id: int) -> list[tuple[Layout, str | None]]:
        """The table's partition history, oldest first, with why each layout came."""
        rows = self._all(
            "SELECT bounds, ids, from_seq, reason FROM layouts WHERE table_id = ? ORDER BY from_seq", (table_id,)
        )
        return [(Layout(b, tuple(json.loads(i)), f), why) for b, i, f, why in rows]

    def next_partition_id(self, table_id: int) -> int:
        """An id no partition of the table ever had (ids are never reused: old layouts keep theirs)."""
        used = [max(json.loads(ids), default=-1) for (ids,) in self._all("SELECT ids FROM layouts WHERE table_id = ?", (table_id,))]
        (top,) = self._one("SELECT max(part) FROM deltas WHERE table_id = ?", (table_id,))
        return max([-1, *used, -1 if top is None else top]) + 1

    def partition_stats(self, table_id: int) -> dict[int, tuple[int, int, int]]:
        """Per partition with live deltas: (deltas, row versions, delete versions)."""
        rows = self._all(
            "SELECT part, count(*), sum(rows), sum(deletes) FROM deltas WHERE table_id = ? AND retired_at IS NULL GROUP BY part",
            (table_id,),
        )
        return {p: (n, rows, deletes) for p, n, rows, deletes in rows}

    def commit_layout(
        self, table_id: int, old: Layout, new: Layout, retire: list[Delta], add: list[NewDelta], reason: str
    ) -> bool:
        """Make a repartition visible in one transaction: the new layout holds from `new.from_seq`
        on, the old partitions' deltas (`retire`: every live one) are retired for reads at seqs
        below it, and the new partitions' deltas appear. Returns False (and changes nothing) if
        the table's layout is no longer `old` or some delta to retire is no longer live (a
        re-copy, a compaction, another repartition won the race)."""
        with self._tx():
            row = self._one("SELECT partition_bounds, partition_ids FROM tables WHERE id = ?", (table_id,))
            if row is None:
                return False
            current = Layout.of(row[0], None if row[1] is None else json.loads(row[1]))
            if (current.bounds_b64, current.ids) != (old.bounds_b64, old.ids):
                return False
            gone = set(old.ids) - set(new.ids)
            if not gone:
                return False
            marks = ",".join("?" * len(gone))
            live = {r[0] for r in self._all(
                f"SELECT id FROM deltas WHERE table_id = ? AND retired_at IS NULL AND part IN ({marks})", (table_id, *gone))}
            if live != {d.id for d in retire}:
                return False
            now = self.clock()
            if self._one("SELECT count(*) FROM layouts WHERE table_id = ?", (table_id,))[0] == 0:
                # A table copied before layouts were recorded: its first layout holds from its copy.
                (copy_seq,) = self._one("SELECT copy_seq FROM tables WHERE id = ?", (table_id,))
                self._x(
                    "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (table_id, from_seq) DO NOTHING",
                    (table_id, min(copy_seq or 0, new.from_seq), old.bounds_b64, json.dumps(list(old.ids)), now,
                     "initial copy"),
                )
            for d in retire:
                self._x("UPDATE deltas SET retired_at = ?, until_seq = ? WHERE id = ?", (now, new.from_seq, d.id))
            self._insert_deltas(add)
            self._x(
                "UPDATE tables SET partition_bounds = ?, partition_ids = ? WHERE id = ?",
                (new.bounds_b64, json.dumps(list(new.ids)), table_id),
            )
            self._x(
                "INSERT INTO layouts (table_id, from_seq, bounds, ids, created_at, reason) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (table_id, from_seq) DO UPDATE SET bounds = excluded.bounds, ids = excluded.ids,"
                " created_at = excluded.created_at, reason = excluded.reason",
                (table_id, new.from_seq, new.bounds_b64, json.dumps(list(new.ids)), now, reason),
            )
        return True
