"""Merge-on-read SQL: the newest version of each key at a seq, over a partition's deltas.

Versions of all deltas with `floor <= _seq <= seq` collapse per key (latest version wins; a
delete hides the row; columns a partial update did not carry come from the key's newest older
version that has them). Reads (htap.pushdown.replica_reader) and compaction (base merges) share
this SQL, so both see exactly the same rows.
"""

from __future__ import annotations

from sqlglot import exp

from htap.replica.models import OP, SEQ, UNSET_MASK


def ident(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")


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


def parquet_source(files: list[str]) -> str:
    return "read_parquet([" + ", ".join(exp.Literal.string(f).sql("duckdb") for f in files) + "])"
