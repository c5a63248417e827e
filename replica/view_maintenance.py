"""Keeping an aggregate view current from a checkpoint's changes (issue 31, the maintenance core).

A view groups one base table's rows that pass its filter by some of its columns and keeps, per
group, COUNT(*) (`_rows`, always), and any of SUM(x), COUNT(x), MIN(x), MAX(x). It is stored as
versions of its groups, like any replica table: one version per group and seq at which the
group's aggregate changed, at the base's own seqs — so the view read at any seq S equals the
aggregate of the base at S.

`group_changes` turns one checkpoint of the base — its new versions (seqs above P, the previous
checkpoint's safe seq), the newest version at or below P of each key they change (its
before-image), and the view's state at P of the groups they touch — into the view's new
versions, vectorized in DuckDB (no per-row Python):

- Each base version lives from its seq until the key's next version (or a truncation). A
  lifetime that begins after P adds its row to its group there; one that ends removes it then.
  An update that moves a row between groups, a delete, a key change (a delete and an insert) all
  fall out of the lifetimes.
- COUNT and SUM are signed sums over the additions and removals, run per group in seq order on
  top of the group's state at P: exact for integers and decimals (float sums are not kept).
- MIN (MAX alike) runs as the least of the state at P and the values added so far — exact
  unless a value removed could have been the minimum (a removed value at most the running
  minimum: it, or a tie, held it). Such groups are recomputed: the caller's `extremes` gives
  their minimum at P over the rows the checkpoint leaves alone, and the rows alive at each seq
  are taken from the lifetimes.
- A truncation at seq t ends every lifetime begun before t and empties the groups at P from t
  on: the caller truncates the view at t too.

The caller reads the before-images and the states at P (the key indexes of the base and of the
view, at P), writes the returned versions as the view's delta, and commits them with the base's
deltas in one metadata transaction. `checkpoint_changes` turns what writing the base's deltas
reported (htap.replica.deltas.Changed) into `versions` and `before`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from htap import engine
from htap.replica.deltas import Changed
from htap.replica.merge import ident
from htap.replica.models import OP, OP_DELETE, OP_UPSERT, SEQ, delta_schema
from htap.rewrite.views import ROWS_STATE, ViewDefinition

ROWS = ROWS_STATE  # every view's COUNT(*) state: a group with none left is deleted
# A view's stored key: its group's values as a JSON array (a NULL group is a group; keys cannot
# be NULL), so that one version per group supersedes the last as any table's key does.
GROUP_KEY = "_group"
FUNCTIONS = ("sum", "count", "min", "max")


@dataclass(frozen=True)
class Aggregate:
    """One state column of a view: `fn` (sum, count, min, max) of base column `arg`."""

    name: str
    fn: str
    arg: str

    def __post_init__(self):
        if self.fn not in FUNCTIONS:
            raise ValueError(f"view aggregate {self.name}: {self.fn} is not one of {', '.join(FUNCTIONS)}")


@dataclass(frozen=True)
class ViewShape:
    """What a view computes over its base table: the base's key, the columns it groups by, its
    aggregates, and its filter (a DuckDB predicate over the base's columns, or None). Every SUM(x)
    comes with a COUNT(x): a sum over no value is NULL, not 0, and only the count tells them apart."""

    key: tuple[str, ...]
    groups: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    filter_sql: str | None = None

    def __post_init__(self):
        counted = {a.arg for a in self.aggregates if a.fn == "count"}
        for a in self.aggregates:
            if a.fn == "sum" and a.arg not in counted:
                raise ValueError(f"view aggregate {a.name}: SUM({a.arg}) needs a COUNT({a.arg}) beside it")

    @classmethod
    def of(cls, definition: ViewDefinition, key: tuple[str, ...] | list[str]) -> ViewShape:
        """The shape of a parsed view over a base table keyed by `key`."""
        kept = tuple(Aggregate(s.name, s.fn, s.arg) for s in definition.states if s.name != ROWS)
        return cls(tuple(key), definition.groups, kept, definition.filter_sql)

    @property
    def extremes(self) -> tuple[Aggregate, ...]:
        return tuple(a for a in self.aggregates if a.fn in ("min", "max"))

    def state_columns(self) -> list[str]:
        return [ROWS] + [a.name for a in self.aggregates]

    def base_columns(self) -> list[str]:
        """The base table's columns the view needs: its key, group, aggregated and filtered columns
        (what building, keeping and checking it read of the table)."""
        filtered = [c.name for c in sqlglot.parse_one(self.filter_sql, read="duckdb").find_all(exp.Column)] \
            if self.filter_sql else []
        return list(dict.fromkeys([*self.key, *self.groups, *(a.arg for a in self.aggregates), *filtered]))


# The MIN / MAX at P of the given groups (a table of their group columns) over the base rows alive
# at P that pass the filter and whose key the checkpoint does not change: the group columns and
# one column per MIN/MAX aggregate, named as it (NULL: no value).
Extremes = Callable[[pa.Table], pa.Table]


def backfill_sql(shape: ViewShape, relation: str) -> str:
    """The view's states over `relation` (its base's rows at some seq), one row per group that
    has a row passing the filter (no row for a global aggregate over no row): group columns and
    states, named as `ViewShape.state_columns`."""
    states = [f"count(*) AS {ident(ROWS)}"] + [f"{a.fn}({ident(a.arg)}) AS {ident(a.name)}" for a in shape.aggregates]
    where = f" WHERE ({shape.filter_sql}) IS TRUE" if shape.filter_sql else ""
    groups = ", ".join(ident(c) for c in shape.groups)
    return (f"SELECT {groups + ', ' if groups else ''}{', '.join(states)} FROM {relation}{where}"
            f"{' GROUP BY ' + groups if groups else ''} HAVING count(*) > 0")


def keyed_sql(groups: list[str] | tuple[str, ...], relation: str) -> str:
    """`relation`'s rows with the view's stored key (`GROUP_KEY`) in front."""
    values = ", ".join(ident(c) for c in groups)
    return f"SELECT json_array({values})::VARCHAR AS {ident(GROUP_KEY)}, * FROM {relation}"


def view_schema(shape: ViewShape, base: pa.Schema) -> pa.Schema:
    """The columns a view stores: its key, its group columns (typed as in the base) and its
    states (counts BIGINT, sums DECIMAL(38, s), MIN/MAX as the column), as its build computes them."""
    con = engine.cursor()
    try:
        con.register("base_rows", base.empty_table())
        con.register("states", con.sql(backfill_sql(shape, "base_rows")).to_arrow_table())
        return con.sql(keyed_sql(shape.groups, "states")).to_arrow_table().schema
    finally:
        con.close()


def checkpoint_changes(changed: list[Changed], schema: pa.Schema, truncated_at: int | None) -> tuple[pa.Table, pa.Table]:
    """`group_changes`' `versions` and `before` from what writing one checkpoint of the base
    reported (`write_partitioned`'s `changed`): the versions stored (table columns, `_seq`,
    `_op`), and each changed key's row as of the last checkpoint — its newest live version, if
    that is an upsert the base's latest truncation (`truncated_at`: its seq, at or below P)
    left alive. Live deltas older than a truncation stay until garbage collection; reads skip
    them by the same floor."""
    columns = [*schema.names, SEQ, OP]
    stored = delta_schema(schema)
    versions = pa.concat_tables([c.versions.select(stored.names).cast(stored) for c in changed] or [stored.empty_table()])
    found = pa.concat_tables([c.before.cast(stored) for c in changed] or [stored.empty_table()])
    alive = pc.equal(found.column(OP), OP_UPSERT)
    if truncated_at is not None:
        alive = pc.and_(alive, pc.greater_equal(found.column(SEQ), truncated_at))
    return versions.select(columns), found.filter(alive).select(schema.names)


def group_changes(shape: ViewShape, previous_seq: int, before: pa.Table, versions: pa.Table, old: pa.Table,
                  truncations: list[int] | tuple[int, ...] = (), extremes: Extremes | None = None) -> pa.Table:
    """The view's versions for one checkpoint of its base (see the module docstring).

    `before`: the newest upsert version at or below `previous_seq` (P) of the keys `versions`
    changes (base columns; keys without one absent). `versions`: the checkpoint's versions, seqs
    above P, one per key and seq (base columns, `_seq`, `_op`). `old`: the view's state at P of
    (at least) the groups touched (group columns and `state_columns()`). `truncations`: seqs
    above P at which the base was truncated. Returns the group columns, the state columns, `_seq`
    and `_op` (a delete where a group has no row left), by group and seq.
    """
    cuts = sorted(set(truncations))
    con = engine.cursor()
    try:
        con.register("before_rows", before)
        con.register("new_versions", versions)
        con.register("old_states", old)
        con.execute(_lifetimes_sql(shape, previous_seq, cuts))
        con.execute(_contributions_sql(shape, previous_seq))
        con.execute(_running_sql(shape, cuts))
        unsafe = _unsafe_groups(con, shape)
        if unsafe is not None and unsafe.num_rows:
            if extremes is None:
                raise ValueError("a MIN/MAX group lost its extreme and no `extremes` reader was given")
            con.register("unsafe_groups", unsafe)
            con.register("kept_extremes", extremes(unsafe))
            con.execute(_recomputed_sql(shape, cuts))
        else:
            con.execute("CREATE TEMP TABLE recomputed AS SELECT * FROM running WHERE false")
        return con.sql(_output_sql(shape)).to_arrow_table()
    finally:
        con.close()


def _g(shape: ViewShape, alias: str = "") -> str:
    """The group columns, comma-separated (an alias before each), with a trailing comma; '' if none."""
    prefix = f"{alias}." if alias else ""
    return "".join(f"{prefix}{ident(c)}, " for c in shape.groups)


def _same_group(shape: ViewShape, left: str, right: str) -> str:
    """NULL-safe equality of two relations' group columns (a NULL group is a group)."""
    return " AND ".join([f"{left}.{ident(c)} IS NOT DISTINCT FROM {right}.{ident(c)}" for c in shape.groups] or ["true"])


def _epoch(seq: str, cuts: list[int]) -> str:
    """How many truncations come at or before `seq`: the states of different epochs never mix."""
    return " + ".join([f"(CASE WHEN {seq} >= {c} THEN 1 ELSE 0 END)" for c in cuts] or ["0"])


def _lifetimes_sql(shape: ViewShape, previous: int, cuts: list[int]) -> str:
    """Every counted row version the checkpoint's keys had from P on: from its seq until the key's
    next version (`next_seq`, a removal when it comes before any truncation) or the first
    truncation after it began (`to_seq`: the end of its life either way; NULL: alive at the end)."""
    key = ", ".join(ident(c) for c in shape.key)
    columns = sorted({*shape.groups, *(a.arg for a in shape.aggregates)} - set(shape.key))
    carried = ", ".join([key] + [ident(c) for c in columns])
    passes = f"({shape.filter_sql}) IS TRUE" if shape.filter_sql else "true"
    cut = "CASE " + " ".join(f"WHEN from_seq < {c} THEN {c}" for c in cuts) + " END" if cuts else "NULL::BIGINT"
    return f"""
        CREATE TEMP TABLE lifetimes AS
        WITH events AS (
            SELECT {carried}, {previous}::BIGINT AS from_seq, true AS alive, {passes} AS counted FROM before_rows
            UNION ALL
            SELECT {carried}, {ident(SEQ)}::BIGINT AS from_seq, {ident(OP)} = {OP_UPSERT} AS alive,
                   {ident(OP)} = {OP_UPSERT} AND {passes} AS counted
            FROM new_versions
        ), ended AS (
            SELECT *, LEAD(from_seq) OVER (PARTITION BY {key} ORDER BY from_seq) AS next_seq, {cut} AS cut_seq
            FROM events
        )
        SELECT *, CASE WHEN next_seq IS NOT NULL AND (cut_seq IS NULL OR next_seq < cut_seq) THEN next_seq END
                      AS removed_seq,
                  least(next_seq, cut_seq) AS to_seq
        FROM ended WHERE alive AND counted
    """


def _contributions_sql(shape: ViewShape, previous: int) -> str:
    """A lifetime adds its row to its group when it begins after P, and removes it when the key's
    next version ends it (a truncation removes every row at once: the view is truncated too)."""
    values = "".join(f", {ident(c)}" for c in sorted({a.arg for a in shape.aggregates}))
    return f"""
        CREATE TEMP TABLE contributions AS
        SELECT {_g(shape)}from_seq AS seq, 1 AS sign{values} FROM lifetimes WHERE from_seq > {previous}
        UNION ALL
        SELECT {_g(shape)}removed_seq AS seq, -1 AS sign{values} FROM lifetimes WHERE removed_seq IS NOT NULL
    """


def _running_sql(shape: ViewShape, cuts: list[int]) -> str:
    """Per touched group and seq: the signed changes, run in seq order within the seq's epoch, on
    top of the state at P in the first epoch; MIN/MAX as the running extreme of the additions."""
    per_seq = [f"sum(sign) AS {ident('d_' + ROWS)}"]
    for a in shape.aggregates:
        x = ident(a.arg)
        if a.fn == "sum":
            per_seq.append(f"sum(sign * {x}) AS {ident('d_' + a.name)}")
        elif a.fn == "count":
            per_seq.append(f"sum(CASE WHEN {x} IS NULL THEN 0 ELSE sign END) AS {ident('d_' + a.name)}")
        else:
            per_seq.append(f"{a.fn}(CASE WHEN sign > 0 THEN {x} END) AS {ident('d_' + a.name)}")
    window = f"OVER (PARTITION BY {_g(shape, 'd')}d.epoch ORDER BY d.seq ROWS UNBOUNDED PRECEDING)"

    def old(c: str) -> str:  # the state at P: only before the first truncation
        return f"CASE WHEN d.epoch = 0 THEN o.{ident(c)} END"

    states = [f"coalesce({old(ROWS)}, 0) + sum(d.{ident('d_' + ROWS)}) {window} AS {ident(ROWS)}"]
    for a in shape.aggregates:
        change = f"d.{ident('d_' + a.name)}"
        if a.fn in ("sum", "count"):
            states.append(f"coalesce({old(a.name)}, 0) + coalesce(sum({change}) {window}, 0) AS {ident(a.name)}")
        else:
            pick = "least" if a.fn == "min" else "greatest"
            states.append(f"{pick}({old(a.name)}, {a.fn}({change}) {window}) AS {ident(a.name)}")
    return f"""
        CREATE TEMP TABLE running AS
        WITH d AS (
            SELECT {_g(shape)}seq, {_epoch('seq', cuts)} AS epoch, {', '.join(per_seq)}
            FROM contributions GROUP BY ALL
        )
        SELECT {_g(shape, 'd')}d.seq, d.epoch, {', '.join(states)}
        FROM d LEFT JOIN old_states o ON {_same_group(shape, 'd', 'o')}
    """


def _unsafe_groups(con, shape: ViewShape) -> pa.Table | None:
    """The groups where a removed value could have held a MIN (MAX): one at most (at least) the
    running extreme at its seq — it, or a tie of it, may have been the extreme."""
    if not shape.extremes:
        return None
    tests = []
    for a in shape.extremes:
        op = "<=" if a.fn == "min" else ">="
        x, state = f"c.{ident(a.arg)}", f"r.{ident(a.name)}"
        tests.append(f"({x} IS NOT NULL AND ({state} IS NULL OR {x} {op} {state}))")
    groups = _g(shape, "c").rstrip(", ") or "true AS all_rows"
    return con.sql(f"""
        SELECT DISTINCT {groups} FROM contributions c
        JOIN running r ON {_same_group(shape, 'c', 'r')} AND r.seq = c.seq
        WHERE c.sign < 0 AND ({' OR '.join(tests)})
    """).to_arrow_table()


def _recomputed_sql(shape: ViewShape, cuts: list[int]) -> str:
    """MIN/MAX of the unsafe groups at each seq they change: the extreme of the value kept from P
    by the rows the checkpoint leaves alone (only before the first truncation) and of the values
    of the lifetimes alive at that seq (one range join of those seqs with the lifetimes)."""
    at = f"SELECT {_g(shape, 'r')}r.seq, r.epoch FROM running r JOIN unsafe_groups u ON {_same_group(shape, 'r', 'u')}"
    alive = ", ".join(f"{a.fn}(l.{ident(a.arg)}) AS {ident(a.name)}" for a in shape.extremes)
    parts = [f"{_g(shape, 'c')}c.seq"]
    for a in shape.extremes:
        pick = "least" if a.fn == "min" else "greatest"
        parts.append(f"{pick}(CASE WHEN c.epoch = 0 THEN k.{ident(a.name)} END, v.{ident(a.name)}) AS {ident(a.name)}")
    return f"""
        CREATE TEMP TABLE recomputed AS
        WITH changed AS ({at}), alive AS (
            SELECT {_g(shape, 'c')}c.seq, {alive}
            FROM changed c JOIN lifetimes l ON {_same_group(shape, 'l', 'c')}
                 AND l.from_seq <= c.seq AND (l.to_seq IS NULL OR l.to_seq > c.seq)
            GROUP BY ALL
        )
        SELECT {', '.join(parts)}
        FROM changed c LEFT JOIN kept_extremes k ON {_same_group(shape, 'c', 'k')}
        LEFT JOIN alive v ON {_same_group(shape, 'c', 'v')} AND v.seq = c.seq
    """


def _output_sql(shape: ViewShape) -> str:
    """The running states, the recomputed MIN/MAX of unsafe groups in place of theirs; a SUM over
    no value NULL (its COUNT is 0); a group with no row left, a delete."""
    cols = []
    recomputed = {a.name for a in shape.extremes}
    counts = {a.arg: a.name for a in shape.aggregates if a.fn == "count"}
    sums = {a.name: a.arg for a in shape.aggregates if a.fn == "sum"}
    for c in shape.state_columns():
        if c in recomputed:
            cols.append(f"CASE WHEN x.seq IS NULL THEN r.{ident(c)} ELSE x.{ident(c)} END AS {ident(c)}")
        elif c in sums:
            cols.append(f"CASE WHEN r.{ident(counts[sums[c]])} = 0 THEN NULL ELSE r.{ident(c)} END AS {ident(c)}")
        else:
            cols.append(f"r.{ident(c)}")
    return f"""
        SELECT {_g(shape, 'r')}{', '.join(cols)}, r.seq::BIGINT AS {ident(SEQ)},
               (CASE WHEN r.{ident(ROWS)} = 0 THEN {OP_DELETE} ELSE {OP_UPSERT} END)::TINYINT AS {ident(OP)}
        FROM running r LEFT JOIN recomputed x ON {_same_group(shape, 'r', 'x')} AND x.seq = r.seq
        ORDER BY {_g(shape, 'r')}r.seq
    """
