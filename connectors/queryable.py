"""The read side of a source database: what failover reads and the verifiers need from it.

A *queryable* source (Postgres, MySQL/MariaDB; a Debezium source through its `source_dsn`)
answers a pushed plan in its own SQL dialect, at a snapshot when one is given, checks a
role's privileges the way the source itself would, and exports a snapshot that equals one
replica seq exactly. How the source's snapshot is named differs per kind (Postgres: an exported
snapshot id another connection can import; MySQL/MariaDB: a binlog position a consistent
snapshot must start at), so the name is an opaque token to everyone above connectors/.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Iterator

import pyarrow as pa
from sqlglot import exp

from htap.conf import SourceConfig
from htap.connectors.changes import ChangeSource
from htap.connectors.tables import SourceTable
from htap.errors import AccessError, HtapError, SourceError
from htap.rewrite import dialects, render
from htap.rewrite.pushed import PushedPlan, Scan

# The column of `QueryableSource.render_rows` that says which scan a row is of.
SCAN_TAG = "__scan"

# Why a read could not import its query's exported snapshot (htap.pushdown.source_snapshot).
SNAPSHOT_GONE = (
    "the query's source snapshot is no longer held: spark-htap holds it while the query runs and releases it"
    " when the query ends (at most 300 s), and this read started later (the same DataFrame's plan run again"
    " after its query ended); run the query again from its SQL or DataFrame definition to read a new snapshot"
)


class SourceSnapshot(ABC):
    """An exported source snapshot and the replica seq whose state equals it; a context manager
    (the snapshot lives while it is open)."""

    seq: int  # the replica seq whose state equals the snapshot
    name: str  # the token source reads take (the `source_snapshot` option)
    position: str  # where the snapshot sits, in the source's own notation
    max_connections: int | None = None  # transactions at it that may be open at once (None: any)

    @property
    def exact_name(self) -> str:
        """The token for reads that must see exactly this snapshot or fail (verification).
        Default: `name` (every importer sees the snapshot exactly, as in Postgres)."""
        return self.name

    def close(self) -> None:
        """Release the snapshot."""

    def __enter__(self) -> "SourceSnapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def to_dict(self) -> dict:
        return {"seq": self.seq, "seq_position": self.position, "source_snapshot": self.name}

    @abstractmethod
    def open_transaction(self):
        """A DB-API connection in a read-only transaction at this snapshot (the caller closes it)."""


class QueryableSource(ABC):
    """A source database that can answer pushed plans (failover) and be verified against."""

    config: SourceConfig
    dialect: str  # sqlglot dialect of its SQL

    def relation(self, table: SourceTable) -> exp.Expression:
        """The table as the replica holds its rows (each column's fate applied), so pushed filters
        and aggregates on the source give what they give on the replica — strings included: they
        compare by code point, case- and padding-sensitive, as Spark and DuckDB compare them.
        Default: the table."""
        return exp.Table(this=exp.to_identifier(table.name, quoted=True), db=exp.to_identifier(table.schema, quoted=True))

    def source_table(self, table: SourceTable) -> SourceTable:
        """`table` with the column types this database itself has (what the relation and the
        verifier build their SQL from). Default: as described."""
        return table

    def split_points(self, table: SourceTable, range_rows: int) -> list:
        """Values of the first key column that split the table into ranges of about `range_rows`
        rows, read in parallel at one shared snapshot; sorted as Spark orders them. Default: none
        (one read), for a source whose snapshot cannot be shared between connections."""
        return []

    def render(self, tables: list[SourceTable], plan: PushedPlan) -> str:
        """The pushed plan as one query of this source (htap.rewrite.render; `tables[k]` is scan
        k's table): each scan's rows from its table's relation, with its filter and columns,
        and the plan above them — what the replica computes in DuckDB — in the source's dialect."""
        if len(tables) != len(plan.scans):
            raise SourceError(f"a pushed plan of {len(plan.scans)} scans rendered over {len(tables)} tables")
        relations = [render.scan_select(scan, self.relation(t)) for t, scan in zip(tables, plan.scans)]
        return dialects.for_source(render.render_plan(plan, relations), self.dialect).sql(self.dialect)

    def render_rows(self, tables: list[SourceTable], scans: list[Scan]) -> str:
        """The rows of several scans as one statement (one snapshot) of this source, for a plan
        computed outside it: a branch per scan, UNION ALL, each `SELECT k, ...` with scan k's
        columns (its filter applied) in its own slots and every other scan's slots NULL — slot
        `c<j>` numbered across the scans in order. See `htap.pushdown.source_reader`.

        The NULLs are typed: each is the column of an empty read of its scan's table joined to
        the branch (`LEFT JOIN (... LIMIT 0) ON TRUE`). A bare NULL is not: Postgres types a
        UNION's columns pair by pair, and a slot NULL in two branches becomes text, which the
        third branch's integer then cannot match."""
        if len(tables) != len(scans):
            raise SourceError(f"{len(scans)} scans of the source rendered over {len(tables)} tables")
        starts = [sum(len(s.columns) for s in scans[:k]) for k in range(len(scans))]
        width = sum(len(s.columns) for s in scans)
        relations = [self.relation(t) for t in tables]
        branches = []
        for k, scan in enumerate(scans):
            rows = render.scan_select(scan, relations[k].copy()).subquery(f"s{k}", copy=False)
            slots: list[exp.Expression] = [exp.Null() for _ in range(width)]
            query = exp.select().from_(rows, copy=False)
            for i, other in enumerate(scans):
                alias = f"s{k}" if i == k else f"n{i}"
                if i != k and other.columns:
                    empty = render.scan_select(dataclasses.replace(other, filter=()), relations[i].copy()).limit(0)
                    query = query.join(empty.subquery(alias, copy=False), on=exp.true(), join_type="left", copy=False)
                for j, c in enumerate(other.columns):
                    slots[starts[i] + j] = render.column(c, table=alias)
            outputs = [exp.Literal.number(k).as_(SCAN_TAG, quoted=True)]
            outputs += [v.as_(f"c{j}", quoted=True) for j, v in enumerate(slots)]
            branches.append(query.select(*outputs, copy=False))
        query = branches[0]
        for b in branches[1:]:
            query = exp.union(query, b, distinct=False, copy=False)
        return dialects.for_source(query, self.dialect).sql(self.dialect)

    def read(
        self, tables: list[SourceTable], plan: PushedPlan, output: pa.Schema, snapshot: str | None = None, **agree
    ) -> Iterator[pa.RecordBatch]:
        """The plan's rows from the source (one statement) as Arrow batches of `output`, at
        `snapshot` (a `SourceSnapshot.name`) when given. `agree` (`agree=` callable, for a source
        whose reads each open their own snapshot): see the source's `read_query`."""
        what = " JOIN ".join(dict.fromkeys(t.qualified_name for t in tables))
        return self.read_query(self.render(tables, plan), output, snapshot, what=what, **agree)

    @abstractmethod
    def read_query(self, query: str, output: pa.Schema, snapshot: str | None, what: str) -> Iterator[pa.RecordBatch]:
        """Rows of a query this source renders (positionally as `output`), at `snapshot` when given."""

    @abstractmethod
    def check_select(self, user: str, table: SourceTable, columns: list[str]) -> str | None:
        """None if the source role `user` may read those columns, else why not (the replica
        never widens access)."""

    def check_login(self, user: str, password: str) -> str:
        """Log in to the source as `user` with `password` (a real connection, closed at once)
        and return the role `check_select` must then check (AccessError when the source refuses
        the login; its message never holds the password). Default: this source cannot."""
        raise AccessError(f"source {self.config.name} cannot authenticate readers (access.mode = \"login\")")

    def server_process(self) -> int | str:
        """The server's main process id when it runs on this machine (CPU accounting of
        `verify replay`), else why it cannot be measured. Default: unknown."""
        return "this source cannot name its server process"

    @abstractmethod
    def export_snapshot(self, *, exact_seq: bool = True) -> SourceSnapshot:
        """A snapshot of the whole source. With `exact_seq` (the verifiers) it equals the replica
        at one seq; without (a failover query, which only needs its reads to agree with each
        other) a source may export a cheaper one whose `seq` is unknown (-1)."""


class ThroughOrigin(QueryableSource):
    """The tables of a source that is not a database (Debezium) read from the database its
    events come from (`source_dsn`). The events' column types (Kafka Connect) are replaced by
    the origin's own, described there, so every value gets the origin's fates and comparisons."""

    def __init__(self, config: SourceConfig, origin: ChangeSource):
        self.config = config
        self.origin = origin
        self.inner = origin.queryable()
        self.dialect = self.inner.dialect

    def source_table(self, table: SourceTable) -> SourceTable:
        try:
            columns, _key = self.origin.describe_table(table.schema, table.name)
        except HtapError as e:
            raise SourceError(
                f"source {self.config.name}: {table.qualified_name} cannot be read from its origin database "
                f"(sources.{self.config.name}.source_dsn): {e}"
            ) from e
        native = {c.name: c.source_type for c in columns}
        missing = [c.name for c in table.columns if c.name not in native]
        if missing:
            raise SourceError(
                f"source {self.config.name}: {table.qualified_name} in the origin database has no column(s) {missing}; "
                f"does sources.{self.config.name}.source_dsn name the database the events come from?"
            )
        return dataclasses.replace(
            table, columns=tuple(dataclasses.replace(c, source_type=native[c.name]) for c in table.columns)
        )

    def render(self, tables, plan) -> str:
        return self.inner.render([self.source_table(t) for t in tables], plan)

    def render_rows(self, tables, scans) -> str:
        return self.inner.render_rows([self.source_table(t) for t in tables], scans)

    def read_query(self, query, output, snapshot, what, **agree):
        return self.inner.read_query(query, output, snapshot, what, **agree)

    def check_select(self, user: str, table: SourceTable, columns: list[str]) -> str | None:
        return self.inner.check_select(user, table, columns)

    def check_login(self, user: str, password: str) -> str:
        return self.inner.check_login(user, password)

    def export_snapshot(self, *, exact_seq: bool = True) -> SourceSnapshot:
        return self.inner.export_snapshot(exact_seq=exact_seq)

    def split_points(self, table: SourceTable, range_rows: int) -> list:
        return self.inner.split_points(table, range_rows)

    def server_process(self) -> int | str:
        return self.inner.server_process()
