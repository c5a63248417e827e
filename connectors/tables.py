"""How a source table looks to the connectors: its columns, its key and its replica types.

The replica keeps much more about each HTAP table (state, safe seqs, partitions; see
`htap.replica.models.TableInfo`), but a connector needs only this much to copy and stream a
table, so the connectors depend on this description and never on the replica.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from htap.errors import TableError


@dataclass(frozen=True)
class Column:
    name: str
    source_type: str  # the source's spelling, e.g. "numeric(12,2)"
    nullable: bool
    added_version: int = 1  # schema version that added it: older deltas hold no value for it
    override: str | None = None  # the replica type chosen at `tables add --column-type` (see OVERRIDE_TYPES)


# The replica types a column can be given by hand (`htap tables add <t> --column-type col=<type>`)
# when its source type has no replica type that holds every value.
OVERRIDE_TYPES = "string (the source's exact text), double, or decimal(p,s) with p <= 38"
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def override_type(spelling: str) -> pa.DataType:
    """The Arrow type of a column type override; TableError naming the choices if unknown."""
    t = spelling.strip().lower()
    if t == "string":
        return pa.string()
    if t == "double":
        return pa.float64()
    m = _DECIMAL.match(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if 1 <= precision <= 38 and scale <= precision:
            return pa.decimal128(precision, scale)
    raise TableError(f"column type override {spelling!r} is not one of: {OVERRIDE_TYPES}")


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`col=type` arguments -> {column: normalized type}; ConfigError-like TableError on bad input."""
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, spelling = item.partition("=")
        if not sep or not name.strip():
            raise TableError(f"--column-type {item!r}: write <column>=<type>, type one of: {OVERRIDE_TYPES}")
        override_type(spelling)
        out[name.strip()] = spelling.strip().lower().replace(" ", "")
    return out


def apply_overrides(columns: list[Column], overrides: dict[str, str], table: str) -> list[Column]:
    """`columns` with their overrides (by name); TableError for a name that is not a column."""
    names = {c.name for c in columns}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TableError(f"{table} has no column {', '.join(unknown)} (--column-type); its columns: {', '.join(sorted(names))}")
    return [Column(c.name, c.source_type, c.nullable, c.added_version, overrides.get(c.name, c.override)) for c in columns]


def keep_overrides(described: list[Column], previous: tuple[Column, ...] | list[Column]) -> list[Column]:
    """Freshly described columns with the overrides chosen for them before. An override belongs
    to the source type it was chosen for: when the source changes the column's type, the new
    type's own fate applies (that is how a column is fixed in the source)."""
    chosen = {c.name: (c.source_type, c.override) for c in previous if c.override}
    return [
        Column(c.name, c.source_type, c.nullable, c.added_version,
               chosen[c.name][1] if chosen.get(c.name, (None,))[0] == c.source_type else None)
        for c in described
    ]


class SourceTable(Protocol):
    """A table a connector copies and streams (the replica's TableInfo is one)."""

    @property
    def id(self) -> int: ...  # unique per replica (names temporary slots and files)

    @property
    def schema(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def columns(self) -> tuple[Column, ...]: ...  # source order

    @property
    def key(self) -> tuple[str, ...]: ...  # primary key columns, in key order

    @property
    def copy_seq(self) -> int | None: ...  # the seq the table's initial copy reflects, once copied

    @property
    def arrow_schema(self) -> pa.Schema: ...  # the replica's Arrow type per column

    @property
    def qualified_name(self) -> str: ...
