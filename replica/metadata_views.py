"""Derived views in the metadata store (issue 31): a view is a replica table of its own (kind
'view', in schema `views`: its groups' states, kept and read as any replica table's rows) and a
`views` row naming the table it aggregates, its SQL and its parsed definition. Ingest never
lists views (`list_tables` leaves them out unless asked): they are not copied or streamed from
the source but kept from their base table's checkpoints."""

from __future__ import annotations

import json
from dataclasses import dataclass

from htap.errors import NoSuchTableError, TableError
from htap.replica.metadata_tables import TableRecords, columns_json
from htap.replica.models import KIND_VIEW, STATE_PENDING, VIEWS_SCHEMA, Column, TableInfo
from htap.rewrite.views import ViewDefinition


@dataclass(frozen=True)
class ViewInfo:
    """A view: its own replica table, the table it aggregates, the SQL it was defined with and
    the definition parsed from it (htap.rewrite.views)."""

    table: TableInfo
    base_id: int
    sql: str
    definition: ViewDefinition
    created_at: float

    @property
    def name(self) -> str:
        return self.table.name


class ViewRecords(TableRecords):
    """Views and the tables they aggregate."""

    _VIEW_COLUMNS = "v.base_id, v.sql, v.definition, v.created_at"

    def add_view(self, base: TableInfo, name: str, sql: str, definition: ViewDefinition, columns: list[Column],
                 key: list[str], arrow_schema: str) -> ViewInfo:
        """A new view of `base` (pending: not yet built) as `views.<name>` of base's source, in one
        transaction: its replica table (`columns`, `key`: the stored states, one row per group)
        and its definition."""
        with self._tx():
            if self._one("SELECT 1 FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?",
                         (base.source, VIEWS_SCHEMA, name)):
                raise TableError(f"{VIEWS_SCHEMA}.{name} already exists in source {base.source!r}: drop it first or"
                                 f" choose another name")
            if not self._one("SELECT 1 FROM tables WHERE id = ?", (base.id,)):
                raise NoSuchTableError(f"{base.qualified_name} is no longer an HTAP table of source {base.source!r}")
            now = self.clock()
            self._x(
                "INSERT INTO tables (source, schema_name, table_name, columns_json, key_json, arrow_schema, state,"
                " created_at, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (base.source, VIEWS_SCHEMA, name, columns_json(columns), json.dumps(key), arrow_schema,
                 STATE_PENDING, now, KIND_VIEW),
            )
            table_id = self._one("SELECT id FROM tables WHERE source = ? AND schema_name = ? AND table_name = ?",
                                 (base.source, VIEWS_SCHEMA, name))[0]
            self._x("INSERT INTO views (table_id, base_id, sql, definition, created_at) VALUES (?, ?, ?, ?, ?)",
                    (table_id, base.id, sql, definition.to_json(), now))
        return self.get_view(base.source, name)

    def get_view(self, source: str, name: str) -> ViewInfo:
        found = self._views("t.source = ? AND t.table_name = ?", (source, name))
        if not found:
            known = ", ".join(v.name for v in self.list_views(source)) or "none"
            raise NoSuchTableError(f"{VIEWS_SCHEMA}.{name} is not a view of source {source!r} (its views: {known})")
        return found[0]

    def list_views(self, source: str | None = None) -> list[ViewInfo]:
        return self._views("t.source = ?", (source,)) if source is not None else self._views("true", ())

    def views_of(self, base_id: int) -> list[ViewInfo]:
        """The views that aggregate this table (each kept from its checkpoints)."""
        return self._views("v.base_id = ?", (base_id,))

    def views_using(self, table: TableInfo) -> list[ViewInfo]:
        """The views that aggregate this table or join it as a dimension."""
        return [v for v in self.list_views(table.source)
                if v.base_id == table.id or any(d.table == table.qualified_name for d in v.definition.dimensions)]

    def _views(self, condition: str, params: tuple) -> list[ViewInfo]:
        columns = ", ".join(f"t.{c.strip()}" for c in self._TABLE_COLUMNS.split(","))
        rows = self._all(f"SELECT {columns}, {self._VIEW_COLUMNS} FROM views v JOIN tables t ON t.id = v.table_id"
                         f" WHERE {condition} ORDER BY t.id", params)
        width = len(self._TABLE_COLUMNS.split(","))
        return [ViewInfo(self._table(r[:width]), r[width], r[width + 1], ViewDefinition.from_json(r[width + 2]),
                         r[width + 3]) for r in rows]
