"""What a view aggregates (issue 31): its table's rows, or for a join view each row of its table
joined with its dimensions' rows by their keys — "the joined rows", one per row of the table that
has a row in every dimension, keyed by the table's key, with columns named as
htap.rewrite.views.Dimension says. A view's shape (htap.replica.view_maintenance.ViewShape) is
over these rows, so building, keeping and checking a join view is the same aggregate as for one
table, over a different relation.

Two things are built here: the joined rows at a seq (`ViewBase.rows_at`: a build, a MIN/MAX
recompute, `htap verify data`), and one checkpoint's changes of the joined rows from the changes
of every table they join (`ViewBase.checkpoint`), as `group_changes` takes a table's. A joined
row changes when its table's row does, and when the dimension row it joins does: then every row
of the table joined to that dimension key is affected (found by a read of the table at P), and
its joined versions are taken at every seq where either side changed (an as-of join of each
side's versions). A truncation of any joined table ends every joined row at its seq: the view
is truncated there too. The dimensions are read whole at P (they are the small side of a join).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import duckdb
import pyarrow as pa

from htap import engine
from htap.errors import NoSuchTableError
from htap.replica.deltas import Changed
from htap.replica.merge import ident
from htap.replica.metadata import MetadataStore, ViewInfo
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ, TableInfo
from htap.replica.table_reads import read_at, rows_at
from htap.replica.view_maintenance import ViewShape, checkpoint_changes
from htap.replica.warehouse import Warehouse
from htap.rewrite.views import Dimension


def joined_schema(shape: ViewShape, table: pa.Schema, dimensions: list[tuple[Dimension, pa.Schema]]) -> pa.Schema:
    """The columns of the joined rows a view uses, typed as in their tables."""
    types = {d.name(c): schema.field(c).type for d, schema in dimensions for c in d.columns}
    return pa.schema([pa.field(c, types[c]) if c in types else table.field(c) for c in shape.base_columns()])


@dataclass(frozen=True)
class ViewBase:
    """A view's table and its dimensions (each with its definition), as the store has them now."""

    table: TableInfo
    dimensions: tuple[tuple[Dimension, TableInfo], ...] = ()

    @classmethod
    def of(cls, store: MetadataStore, view: ViewInfo) -> ViewBase:
        """The tables of `view` (a NoSuchTableError naming a dimension no longer an HTAP table)."""
        table = store.table_by_id(view.base_id)
        dimensions = []
        for d in view.definition.dimensions:
            schema, name = d.table.split(".", 1)
            try:
                dimensions.append((d, store.get_table(table.source, schema, name)))
            except NoSuchTableError as e:
                raise NoSuchTableError(f"view {view.name} joins {d.table}, which is no longer an HTAP table: {e}") from e
        return cls(table, tuple(dimensions))

    @property
    def tables(self) -> list[TableInfo]:
        return [self.table, *(t for _, t in self.dimensions)]

    def _dimension_columns(self, shape: ViewShape) -> set[str]:
        return {d.name(c) for d, _ in self.dimensions for c in d.columns} & set(shape.base_columns())

    def of_groups(self, shape: ViewShape) -> str | None:
        """The `keys_where` of a read of the rows of the groups in a registered `__groups` (their
        group columns): where every group column is the table's own, the versions in one of the
        groups; None (every key) where the view has no groups or groups by a dimension's column."""
        if not shape.groups or set(shape.groups) & self._dimension_columns(shape):
            return None
        return ("EXISTS (SELECT 1 FROM __groups AS g WHERE "
                + " AND ".join(f"g.{ident(c)} IS NOT DISTINCT FROM r.{ident(c)}" for c in shape.groups) + ")")

    def table_columns(self, shape: ViewShape) -> list[str]:
        """The table's columns the joined rows need: its key, its columns the view uses, and the
        columns it joins the dimensions on."""
        dimension = self._dimension_columns(shape)
        joins = [c for d, _ in self.dimensions for c, _key in d.on]
        return list(dict.fromkeys([*(c for c in shape.base_columns() if c not in dimension), *joins]))

    def columns_of(self, shape: ViewShape) -> list[tuple[TableInfo, list[str]]]:
        """Each table with its columns the view reads (what a reader's access is checked on)."""
        return [(self.table, self.table_columns(shape)), *((t, self._read(d)) for d, t in self.dimensions)]

    def _joined_sql(self, shape: ViewShape, table: str, dimensions: list[str]) -> str:
        """The joined rows of `table` (a relation of its rows) and the dimension relations named
        in `dimensions`, with exactly the columns of `shape.base_columns()`."""
        if not self.dimensions:
            return f"SELECT {', '.join(ident(c) for c in shape.base_columns())} FROM {table}"
        picks = self._picks(shape, lambda c: f"t.{ident(c)}")
        joins = "".join(f" JOIN {relation} AS d{i} ON " + " AND ".join(f"t.{ident(c)} = d{i}.{ident(k)}" for c, k in d.on)
                        for i, ((d, _), relation) in enumerate(zip(self.dimensions, dimensions)))
        return f"SELECT {', '.join(picks)} FROM {table} AS t{joins}"

    def _picks(self, shape: ViewShape, of_table) -> list[str]:
        """The select list of the joined rows: a dimension's column from its relation `d<i>`,
        the table's as `of_table(column)` says."""
        names = {d.name(c): f"d{i}.{ident(c)}" for i, (d, _) in enumerate(self.dimensions) for c in d.columns}
        return [f"{names[c]} AS {ident(c)}" if c in names else of_table(c) for c in shape.base_columns()]

    @contextmanager
    def rows_at(self, warehouse: Warehouse, store: MetadataStore, seq: int, shape: ViewShape,
                holder: str, keys_where: str | None = None) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
        """A DuckDB cursor and the SQL of the joined rows at `seq` (the columns the view uses);
        `keys_where`: only the table's keys some version of which satisfies it (table_reads.rows_at)."""
        with rows_at(warehouse, store, self.table, seq, self.table_columns(shape), holder, keys_where) as (con, rows):
            relations = []
            for i, (d, table) in enumerate(self.dimensions):
                con.register(f"__dimension_{i}", read_at(warehouse, store, table, seq, self._read(d), holder))
                relations.append(f"__dimension_{i}")
            yield con, self._joined_sql(shape, f"({rows})", relations)

    @staticmethod
    def _read(d: Dimension) -> list[str]:
        """A dimension's columns the joined rows need: its key and the columns the view uses."""
        return list(dict.fromkeys([*(k for _, k in d.on), *d.columns]))

    def checkpoint(self, warehouse: Warehouse, store: MetadataStore, shape: ViewShape, previous: int,
                   changed: dict[int, list[Changed]], truncations: dict[int, list[int]],
                   holder: str) -> tuple[pa.Table, pa.Table, list[int]]:
        """One checkpoint's `before` and `versions` of the joined rows (see group_changes), and
        the seqs above P (`previous`) at which they were all ended (truncations of any table)."""
        table = self.table
        versions, before = checkpoint_changes(changed.get(table.id, []), table.arrow_schema,
                                              store.truncated_at(table.id, previous))
        cuts = sorted({s for t in self.tables for s in truncations.get(t.id, [])})
        if not self.dimensions:
            return before, versions, cuts
        columns = self.table_columns(shape)
        con = engine.cursor()
        try:
            con.register("__table_new", versions.select([*columns, SEQ, OP]))
            con.register("__table_before", before.select(columns))
            moved = []  # the dimension keys some version of this checkpoint wrote
            for i, (d, dim) in enumerate(self.dimensions):
                dim_versions, _ = checkpoint_changes(changed.get(dim.id, []), dim.arrow_schema,
                                                     store.truncated_at(dim.id, previous))
                con.register(f"__dim_new_{i}", dim_versions.select([*self._read(d), SEQ, OP]))
                con.register(f"__dim_old_{i}", read_at(warehouse, store, dim, previous, self._read(d), holder))
                if dim_versions.num_rows:
                    moved.append((i, d, dim_versions.select([k for _, k in d.on])))
            joined_to_moved = self._rows_joined_to(warehouse, store, shape, previous, versions, moved, holder)
            con.register("__table_old_moved", joined_to_moved)
            con.execute(f"CREATE TEMP TABLE __table_old AS SELECT * FROM __table_before UNION ALL "
                        f"SELECT {', '.join(ident(c) for c in columns)} FROM __table_old_moved")
            old = self._joined_sql(shape, "__table_old", [f"__dim_old_{i}" for i in range(len(self.dimensions))])
            joined_before = con.sql(old).to_arrow_table()
            steps, select = self._versions_sql(shape, previous, truncations)
            for step in steps:
                con.execute(step)
            joined_versions = con.sql(select).to_arrow_table()
        finally:
            con.close()
        return joined_before, joined_versions, cuts

    def _rows_joined_to(self, warehouse: Warehouse, store: MetadataStore, shape: ViewShape, previous: int,
                        versions: pa.Table, moved: list, holder: str) -> pa.Table:
        """The table's rows at P joined to a dimension key this checkpoint wrote, but for the keys
        its own versions change (their rows at P are `before` already)."""
        columns = self.table_columns(shape)
        if not moved:
            return pa.table({c: pa.array([], versions.schema.field(c).type) for c in columns})
        key = list(self.table.key)
        tests = " OR ".join(f"EXISTS (SELECT 1 FROM __moved_{i} AS m WHERE "
                            + " AND ".join(f"r.{ident(c)} = m.{ident(k)}" for c, k in d.on) + ")" for i, d, _ in moved)
        # (only the keys some version of which joins a moved key are merged: not the whole table)
        with rows_at(warehouse, store, self.table, previous, columns, holder, keys_where=tests) as (con, rows):
            con.register("__changed_keys", versions.select(key))
            for i, _, keys in moved:
                con.register(f"__moved_{i}", keys)
            own = " AND ".join(f"c.{ident(k)} = r.{ident(k)}" for k in key)
            return con.sql(f"SELECT * FROM ({rows}) AS r WHERE ({tests}) AND NOT EXISTS "
                           f"(SELECT 1 FROM __changed_keys AS c WHERE {own})").to_arrow_table()

    def _versions_sql(self, shape: ViewShape, previous: int, truncations: dict[int, list[int]]) -> tuple[list[str], str]:
        """The joined rows' versions: at every seq above P where a row of the table or the
        dimension row it joins then changed, the table's row as of that seq joined with the
        dimension rows as of that seq (an as-of join of each side's versions), an upsert where
        every side is alive (not deleted, not ended by a truncation at or before the seq), else
        a delete. Unchanged versions are harmless: a removal and an addition of the same row.
        The statements that build each side's history, then the query."""
        key = list(self.table.key)
        columns = self.table_columns(shape)

        def history(name: str, new: str, old: str, cols: list[str]) -> str:
            picked = ", ".join(ident(c) for c in cols)
            return (f"CREATE TEMP TABLE {name} AS SELECT {picked}, {int(previous)}::BIGINT AS __from, true AS __alive"
                    f" FROM {old} UNION ALL SELECT {picked}, {ident(SEQ)}::BIGINT, {ident(OP)} = {OP_UPSERT} FROM {new}")

        def floor(table: TableInfo) -> str:  # the last truncation at or before the seq (0: none)
            cuts = sorted(truncations.get(table.id, []), reverse=True)
            return "CASE " + " ".join(f"WHEN c.seq >= {t} THEN {t}" for t in cuts) + " ELSE 0 END" if cuts else "0"

        steps = [history("__table_hist", "__table_new", "__table_old", columns)]
        seqs = [f"SELECT {', '.join(ident(k) for k in key)}, {ident(SEQ)} AS seq FROM __table_new"]
        joins, alive = [], [f"t.__alive AND t.__from >= {floor(self.table)}"]
        for i, (d, dim) in enumerate(self.dimensions):
            steps.append(history(f"__dim_hist_{i}", f"__dim_new_{i}", f"__dim_old_{i}", self._read(d)))
            on = " AND ".join(f"h.{ident(c)} = n.{ident(k)}" for c, k in d.on)
            seqs.append(f"SELECT {', '.join('h.' + ident(k) for k in key)}, n.{ident(SEQ)} FROM __table_hist AS h "
                        f"JOIN __dim_new_{i} AS n ON {on}")
            joins.append(f" ASOF LEFT JOIN __dim_hist_{i} AS d{i} ON "
                         + " AND ".join(f"t.{ident(c)} = d{i}.{ident(k)}" for c, k in d.on) + f" AND c.seq >= d{i}.__from")
            alive.append(f"d{i}.__alive AND d{i}.__from >= {floor(dim)}")
        picks = self._picks(shape, lambda c: f"c.{ident(c)}" if c in key else f"t.{ident(c)}")
        same_key = " AND ".join(f"c.{ident(k)} = t.{ident(k)}" for k in key)
        return steps, f"""
            WITH c AS (SELECT DISTINCT * FROM ({' UNION ALL '.join(seqs)}))
            SELECT {', '.join(picks)}, c.seq::BIGINT AS {ident(SEQ)},
                   (CASE WHEN coalesce({' AND '.join(f'({a})' for a in alive)}, false) THEN {OP_UPSERT}
                         ELSE {OP_DELETE} END)::TINYINT AS {ident(OP)}
            FROM c ASOF LEFT JOIN __table_hist AS t ON {same_key} AND c.seq >= t.__from{''.join(joins)}
            ORDER BY {', '.join('c.' + ident(k) for k in key)}, c.seq
        """
