"""Derived views kept at checkpoints (issue 31): the service builds each new view from its base
table and then keeps it current in the same metadata transaction as the base's deltas, so a
view read at seq S equals the aggregate of its base at S.

At the start of a checkpoint (`prepare`), a pending view of a streaming base is built: the
aggregate of the base at P (the source's durable position, which every streaming table and view
has reached) written as one delta at seq P, the view then catching up from P like a copied table.
A view whose base is copied again goes back to pending (rebuilt once the base streams again); one
whose base failed fails too. Writing the base's deltas reports what they changed
(htap.replica.deltas.Changed); `write` turns that into each view's new versions
(htap.replica.view_maintenance.group_changes: signed contributions per group, MIN/MAX groups
that lost their extreme recomputed from the base at P) and writes them as the view's delta; a
join view's table and dimensions all report, and their changes become the joined rows' changes
(htap.replica.view_bases) — any of its tables copied again or failed moves it as its base would. A
view whose maintenance fails fails alone, with the error; a warehouse that does not store a
delta fails the whole checkpoint, as for any table.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import ExitStack

import numpy as np
import pyarrow as pa

from htap import engine
from htap.errors import NoSuchTableError, WarehouseError
from htap.observe import phase
from htap.replica.deltas import Changed, delete_delta_files, write_delta, write_partitioned
from htap.replica.merge import ident
from htap.replica.metadata import MetadataStore, NewDelta, ViewInfo
from htap.replica.models import (
    OP,
    OP_UPSERT,
    ORD,
    SEQ,
    STATE_CATCHING_UP,
    STATE_COPYING,
    STATE_FAILED,
    STATE_PENDING,
    STATE_STREAMING,
    TableInfo,
)
from htap.replica.table_reads import read_at
from htap.replica.view_bases import ViewBase
from htap.replica.view_maintenance import ViewShape, backfill_sql, group_changes, keyed_sql
from htap.replica.warehouse import Warehouse

log = logging.getLogger(__name__)
HOLDER = "view maintenance"


@dataclasses.dataclass
class Kept:
    """What keeping the views adds to a checkpoint's metadata transaction."""

    deltas: list[NewDelta] = dataclasses.field(default_factory=list)
    truncations: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    failures: list[tuple[int, str]] = dataclasses.field(default_factory=list)


class ViewKeeper:
    """The views of one source, built and kept at its checkpoints (one checkpoint at a time)."""

    def __init__(self, warehouse: Warehouse, source: str):
        self.warehouse = warehouse
        self.source = source
        self._kept: list[tuple[ViewInfo, ViewBase]] = []  # this checkpoint's views to keep, with their tables
        self._failures: list[tuple[int, str]] = []  # views that failed in `prepare`: committed by `write`
        self._position: int | None = None  # the source's durable seq when the checkpoint began (P)

    def prepare(self, store: MetadataStore) -> dict[int, list[Changed]]:
        """Before a checkpoint writes its deltas: build pending views, move views of re-copied or
        failed tables, and return an empty `changed` list per table whose views are kept (for
        `write_partitioned`): a join view's table and its dimensions."""
        self._kept, failures = [], []
        self._position = store.source_position(self.source)
        for view in store.list_views(self.source):
            state = view.table.state
            try:
                base = ViewBase.of(store, view)
            except NoSuchTableError as e:
                if state != STATE_FAILED:
                    failures.append((view.table.id, str(e)))
                continue
            broken = next((t for t in base.tables if t.state == STATE_FAILED), None)
            if broken is not None:
                if state != STATE_FAILED:
                    failures.append((view.table.id, f"view {view.name}: its table {broken.qualified_name} failed"
                                                    f" ({broken.error}); `htap views rebuild {view.name}` once it is copied again"))
                continue
            copying = next((t for t in base.tables if t.state != STATE_STREAMING), None)
            if copying is not None:
                if state in (STATE_STREAMING, STATE_CATCHING_UP):
                    store.resync(view.table.id, f"its table {copying.qualified_name} is being copied again")
                continue
            # (copying: a build the service was killed in the middle of)
            if state in (STATE_PENDING, STATE_COPYING) and self._position is not None \
                    and all(t.max_safe_seq == self._position for t in base.tables):
                try:
                    view = self._build(store, view, base, self._position)
                except WarehouseError:
                    raise
                except Exception as e:  # noqa: BLE001 - the view fails alone, with what went wrong
                    failures.append((view.table.id, f"view {view.name} could not be built: {e}"))
                    continue
                state = view.table.state
            if state in (STATE_STREAMING, STATE_CATCHING_UP):
                self._kept.append((view, base))
        self._failures = failures
        return {t.id: [] for _, base in self._kept for t in base.tables}

    def before_columns(self, table_id: int) -> tuple[str, ...]:
        """The columns of a changed key's previous row (write_partitioned's `before_columns`)
        that this checkpoint's views read: those a view over the table reads (ViewBase
        .table_columns); none for a table only joined as a dimension (its versions are enough)."""
        columns = []
        for view, base in self._kept:
            if base.table.id == table_id:
                columns += [*base.table.key, *base.table_columns(ViewShape.of(view.definition, base.table.key))]
        return tuple(dict.fromkeys(columns))

    def _build(self, store: MetadataStore, view: ViewInfo, base: ViewBase, seq: int) -> ViewInfo:
        """The view as of `seq`: the aggregate of its (joined) rows then, one delta at `seq`."""
        with phase("view_build"):
            for path in store.start_copy(view.table.id):
                delete_delta_files(self.warehouse, path)
            shape = ViewShape.of(view.definition, base.table.key)
            with base.rows_at(self.warehouse, store, seq, shape, HOLDER) as (con, rows):
                states = con.sql(backfill_sql(shape, f"({rows})")).to_arrow_table()
            data = _stored(states, shape, view.table, seq)
            deltas = [write_delta(self.warehouse, view.table, data)] if data.num_rows else []
            store.finish_copy(view.table.id, deltas, seq, None)
        log.info("view %s built from %s at seq %s: %d groups", view.name,
                 " joined with ".join(t.qualified_name for t in base.tables), seq, data.num_rows)
        return store.get_view(self.source, view.name)

    def write(self, store: MetadataStore, changed: dict[int, list[Changed]], truncations: list[tuple[int, int]],
              failed: set[int], locks: ExitStack) -> Kept:
        """After the table deltas are written: each kept view's delta for this checkpoint, its
        truncations and the views that failed (to commit with the table deltas)."""
        kept = Kept(failures=list(self._failures))
        previous = self._position
        cuts: dict[int, list[int]] = {}
        for t, s in truncations:
            cuts.setdefault(t, []).append(s)
        for view, base in self._kept:
            broken = next((t for t in base.tables if t.id in failed), None)
            if broken is not None:
                kept.failures.append((view.table.id, f"view {view.name}: its table {broken.qualified_name} failed"
                                                     f" in this checkpoint; `htap views rebuild {view.name}` once it is copied again"))
                continue
            moved = any(cuts.get(t.id) or any(c.versions.num_rows for c in changed.get(t.id, [])) for t in base.tables)
            if previous is None or not moved:
                continue
            try:
                with phase("views"):
                    deltas, ended = self._keep(store, view, base, previous, changed, cuts, locks)
            except WarehouseError:
                raise
            except Exception as e:  # noqa: BLE001 - the view fails alone, with what went wrong
                kept.failures.append((view.table.id, f"view {view.name} could not be kept at this checkpoint: {e};"
                                                     f" `htap views rebuild {view.name}` builds it again"))
                continue
            kept.deltas += deltas
            kept.truncations += [(view.table.id, s) for s in ended]
        return kept

    def _keep(self, store: MetadataStore, view: ViewInfo, base: ViewBase, previous: int,
              changed: dict[int, list[Changed]], cuts: dict[int, list[int]],
              locks: ExitStack) -> tuple[list[NewDelta], list[int]]:
        """The view's delta for one checkpoint and the seqs it is truncated at: the states at P of
        its groups (the view read at P), the tables' reports turned into group versions, written
        under the view's partition lock (held until the commit, like the tables')."""
        shape = ViewShape.of(view.definition, base.table.key)
        before, versions, ended = base.checkpoint(self.warehouse, store, shape, previous, changed, cuts, HOLDER)
        states = [*shape.groups, *shape.state_columns()]
        old = read_at(self.warehouse, store, view.table, previous, states, HOLDER)

        def extremes(groups: pa.Table) -> pa.Table:
            # MIN/MAX at P of the groups' rows the checkpoint leaves alone (a read of the rows at P:
            # only of the groups' rows where the groups are over the table's own columns).
            with base.rows_at(self.warehouse, store, previous, shape, HOLDER, base.of_groups(shape)) as (con, rows):
                con.register("__groups", groups)
                con.register("__changed", versions.select(list(base.table.key)))
                return con.sql(_extremes_sql(shape, f"({rows})")).to_arrow_table()

        out = group_changes(shape, previous, before, versions, old, ended, extremes)
        if not out.num_rows:
            return [], ended
        data = _stored(out, shape, view.table, None)
        live = lambda part: {d.path: d.checksum for d in store.deltas(view.table.id, part)}  # noqa: E731
        return write_partitioned(self.warehouse, view.table, data, live, locks, store), ended


def _stored(rows: pa.Table, shape: ViewShape, table: TableInfo, seq: int | None) -> pa.Table:
    """A view's rows (group columns and states, with `_seq`/`_op` unless all are upserts at
    `seq`) as its delta stores them: keyed by `_group`, in its schema, with an order column."""
    con = engine.cursor()
    try:
        con.register("__rows", rows)
        data = con.sql(keyed_sql(shape.groups, "__rows")).to_arrow_table()
    finally:
        con.close()
    if seq is not None:
        data = data.append_column(SEQ, pa.array(np.full(data.num_rows, seq, np.int64)))
        data = data.append_column(OP, pa.array(np.full(data.num_rows, OP_UPSERT, np.int8)))
    data = data.append_column(ORD, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    columns = [*table.arrow_schema.names, SEQ, OP, ORD]
    types = [*table.arrow_schema.types, pa.int64(), pa.int8(), pa.int64()]
    return pa.table([data.column(c).cast(t) for c, t in zip(columns, types)], names=columns)


def _extremes_sql(shape: ViewShape, base: str) -> str:
    """MIN/MAX per asked group (`__groups`) over the base's rows that pass the view's filter and
    whose key is not in `__changed`."""
    same = " AND ".join(f"g.{ident(c)} IS NOT DISTINCT FROM b.{ident(c)}" for c in shape.groups) or "true"
    passes = f"({shape.filter_sql}) IS TRUE" if shape.filter_sql else "true"
    keys = " AND ".join(f"c.{ident(k)} = b.{ident(k)}" for k in shape.key)
    alone = f"SELECT * FROM {base} AS b WHERE {passes} AND NOT EXISTS (SELECT 1 FROM __changed AS c WHERE {keys})"
    picks = ", ".join(f"{a.fn}(b.{ident(a.arg)}) AS {ident(a.name)}" for a in shape.extremes)
    grouped = "".join(f"g.{ident(c)}, " for c in shape.groups)
    return (f"SELECT {grouped}{picks} FROM __groups AS g LEFT JOIN ({alone}) AS b ON {same}"
            f"{' GROUP BY ALL' if shape.groups else ''}")
