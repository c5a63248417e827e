"""Merge-on-read SQL: the newest version of each key at a seq, over a partition's deltas.

Versions of all deltas with `floor <= _seq <= seq` collapse per key (latest version wins; a
delete hides the row; columns a partial update did not carry come from the key's newest older
version that has them). Reads (htap.pushdown.replica_reader) and compaction (base merges) share
this SQL, so both see exactly the same rows.
"""

from __future__ import annotations

from htap.replica.models import OP, OP_UPSERT, SEQ, UNSET_MASK


def ident(name: str) -> str:
    """`name` as a quoted DuckDB identifier (what sqlglot renders, without its cost on every read)."""
    return '"' + name.replace('"', '""') + '"'


def latest_versions_sql(
    source: str,
    key: list[str],
    all_columns: list[str],
    columns: list[str],
    seq: int,
    *,
    floor: int | None = None,
    partial: bool = False,
    key_filters: list[str] = (),
) -> str:
    """Per key, its newest version at or below `seq` (and at or above `floor`), as `columns`
    plus _seq and _op; with `partial`, unset columns are filled from older versions."""
    where = [f"{ident(SEQ)} <= {int(seq)}"]
    if floor is not None:
        where.append(f"{ident(SEQ)} >= {int(floor)}")  # a truncation hides everything older
    where += list(key_filters)
    partition = ", ".join(ident(k) for k in key)
    newest_first = f"PARTITION BY {partition} ORDER BY {ident(SEQ)} DESC"
    cols = []
    for c in columns:
        if not partial or c in key:
            cols.append(ident(c))
            continue
        # The value in the newest version that carried it; the struct keeps a carried NULL
        # apart from "not carried".
        bit = all_columns.index(c)
        carried = f"CASE WHEN ({ident(UNSET_MASK)} >> {bit}) & 1 = 0 THEN struct_pack(v := {ident(c)}) END"
        cols.append(
            f"(first_value({carried} IGNORE NULLS) OVER ({newest_first}"
            f" ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)).v AS {ident(c)}"
        )
    return (
        f"SELECT {', '.join(cols)}, {ident(SEQ)}, {ident(OP)} FROM {source} WHERE {' AND '.join(where)} "
        f"QUALIFY row_number() OVER ({newest_first}) = 1"
    )


def evolved(delta_versions: list[int] | None, added_versions: dict[str, int] | None) -> bool:
    """Whether some delta predates a column or the deltas differ in physical schema."""
    if not delta_versions:
        return False
    oldest = min(delta_versions)
    return len(set(delta_versions)) > 1 or any(v > oldest for v in (added_versions or {}).values())


def versioned_source(files: list[str], versions: list[int], added: dict[str, int] | None, columns: list[str]) -> str:
    """The deltas as one relation in the current logical schema: per schema version, the
    columns that version had, NULL for columns added later; dropped columns are not selected."""
    added = added or {}
    groups: dict[int, list[str]] = {}
    for f, v in zip(files, versions):
        groups.setdefault(v, []).append(f)
    parts = []
    for v, group in sorted(groups.items()):
        cols = [ident(c) if added.get(c, 1) <= v else f"NULL AS {ident(c)}" for c in columns]
        cols += [ident(SEQ), ident(OP), ident(UNSET_MASK)]
        parts.append(f"SELECT {', '.join(cols)} FROM {parquet_source(group)}")
    return "(" + " UNION ALL BY NAME ".join(parts) + ")"


def parquet_source(files: list[str], row_numbers: bool = False) -> str:
    """`files` as one DuckDB relation; `row_numbers`: with each row's ordinal in its file (`file_row_number`)."""
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"read_parquet([{listed}]{', file_row_number = true' if row_numbers else ''})"


def current_rows_sql(
    files: list[str] | str,
    key: list[str],
    all_columns: list[str],
    columns: list[str],
    seq: int,
    *,
    floor: int | None = None,
    partial: bool = False,
    strategy: str = "merge",
    key_conditions: list[str] = (),
    seq_filter: bool = True,
    deletes: bool = True,
) -> str:
    """The rows of one partition at `seq` — `columns` of every live row, one per key — as a
    DuckDB SELECT over the delta `files` (or a registered relation's name).

    `seq_filter=False` (every version in the deltas is inside [floor, seq]) and `deletes=False`
    (no delete version among them) leave out the filters that could not drop a row
    (htap.replica.read_plans.ReadPlan says why that matters).

    This is the relation every read builds on (pushed filters, aggregates and whole pushed
    queries run over it). `strategy` (htap.replica.read_plans.ReadPlan) avoids the general
    per-key merge when the deltas' shape allows it; `key_conditions` are SQL predicates on key
    columns only, applied to every version before the collapse (all versions of a key share them).
    """
    source = files if isinstance(files, str) else parquet_source(files)
    bounds = [f"{ident(SEQ)} <= {int(seq)}", *([f"{ident(SEQ)} >= {int(floor)}"] if floor is not None else [])]
    # each in parentheses: they are ANDed with the bounds and one another, and a condition may be an
    # OR (`id < 18 OR id > 8` let every version of the keys above 8 through: fuzz seed 23 query 257)
    key_conditions = [f"({c})" for c in key_conditions]
    visible = [*(bounds if seq_filter else []), *key_conditions]
    cols = ", ".join(ident(c) for c in [*columns, SEQ, OP])
    if strategy == "direct":  # one version per key: nothing to merge
        latest = f"SELECT {cols} FROM {source}" + (f" WHERE {' AND '.join(visible)}" if visible else "")
    elif strategy == "base":  # the base's version unless a newer delta has one
        newer = latest_versions_sql(parquet_source(files[1:]), key, all_columns, columns, seq, floor=floor,
                                    key_filters=key_conditions)
        match = " AND ".join(f"n.{ident(k)} = b.{ident(k)}" for k in key)
        kept = " AND ".join([*visible, f"NOT EXISTS (SELECT 1 FROM newer AS n WHERE {match})"])
        latest = (
            f"WITH newer AS ({newer}) "
            f"SELECT {cols} FROM {parquet_source(files[:1])} AS b WHERE {kept} "
            f"UNION ALL SELECT {cols} FROM newer"
        )
    else:
        latest = latest_versions_sql(source, key, all_columns, columns, seq, floor=floor, partial=partial,
                                     key_filters=key_conditions)
    upserts = f" WHERE {ident(OP)} = {OP_UPSERT}" if deletes else ""
    return f"SELECT {', '.join(ident(c) for c in columns)} FROM ({latest}) AS latest{upserts}"
