"""The change feed in Spark (issue 29): `readChangeFeed` on the `htap` data source, batch and stream.

    spark.sql("SELECT * FROM shop.changes.public.orders WITH ('startingVersion' = '24116032')")
    spark.readStream.option("startingVersion", "snapshot").table("shop.changes.public.orders")
    spark.read.format("htap").options(config=..., table="public.orders")
        .option("readChangeFeed", "true").option("startingVersion", 24116032).load()

(the catalog's `changes` namespace is io.sparkhtap.ChangeFeedTable: the same data source.)

The rows are the table's columns plus `_change_type`, `_commit_seq` and `_commit_timestamp`
(htap.replica.changes). Offsets of the stream are seqs the replica made readable: every
checkpoint ends between source transactions, so no micro-batch ends inside one, and a query
restarted from its checkpoint asks for the same (start, end] again, which reads the same rows.

Where it starts: `startingVersion` = a seq (changes after it), `latest` (the stream's default:
changes after the replica's seq when the query starts) or `snapshot` (the table's rows at that
seq as inserts, then every change after: how a new downstream copy is bootstrapped), or
`startingTimestamp` (Unix seconds or ISO 8601: changes after the seq the replica had reached
then). A batch read ends at `endingVersion` (default: the replica's seq now).

`maxChangesPerTrigger` caps a micro-batch's row versions (a bigger transaction alone);
`Trigger.AvailableNow` ends at the replica's seq when the query starts.

The driver takes a lease at the range's start (compaction keeps what the range needs while the
tasks read it); tasks read the metadata store read-only, as scans do. A stream named with
`feedName` moves a lease of its own to the start of each range it plans, kept `feedPinHours`:
what it reads next stays readable even once the queryable window has passed it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from htap.errors import ConfigError

OPTION_READ_CHANGE_FEED = "readchangefeed"
OPTION_STARTING_VERSION = "startingversion"
OPTION_STARTING_TIMESTAMP = "startingtimestamp"
OPTION_ENDING_VERSION = "endingversion"
OPTION_MAX_CHANGES = "maxchangespertrigger"
OPTION_FEED_NAME = "feedname"
OPTION_FEED_PIN_HOURS = "feedpinhours"
OPTIONS = (OPTION_READ_CHANGE_FEED, OPTION_STARTING_VERSION, OPTION_STARTING_TIMESTAMP, OPTION_ENDING_VERSION,
           OPTION_MAX_CHANGES, OPTION_FEED_NAME, OPTION_FEED_PIN_HOURS)
FEED_PIN_HOURS = 24.0
LATEST, SNAPSHOT = "latest", "snapshot"


def wanted(options) -> bool:
    """Whether the data source's options ask for the change feed."""
    value = str({k.lower(): v for k, v in options.items()}.get(OPTION_READ_CHANGE_FEED, "false")).lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option readChangeFeed={value!r}: use true or false")
    return value == "true"


@dataclass(frozen=True)
class FeedOptions:
    """Where the feed starts and ends, as the options say."""

    start: int | str | None  # a seq, LATEST or SNAPSHOT; None: startingTimestamp or the default
    start_time: float | None
    end: int | None
    max_changes: int | None = None  # a micro-batch's row versions (more only for one transaction)
    name: str | None = None  # a named feed leases the start of what it reads next (feedName)
    pin_hours: float = FEED_PIN_HOURS  # ... for this long after it last planned a range

    @classmethod
    def parse(cls, options) -> "FeedOptions":
        from htap.seq import parse_seq

        opts = {k.lower(): v for k, v in options.items()}
        start, start_time, end = opts.get(OPTION_STARTING_VERSION), opts.get(OPTION_STARTING_TIMESTAMP), opts.get(OPTION_ENDING_VERSION)
        if start is not None and start_time is not None:
            raise ConfigError("set startingVersion or startingTimestamp, not both")
        try:
            if start is not None and str(start).lower() not in (LATEST, SNAPSHOT):
                start = parse_seq(str(start))
            elif start is not None:
                start = str(start).lower()
            if start_time is not None:
                start_time = _unix_seconds(str(start_time))
            end = parse_seq(str(end)) if end is not None else None
            max_changes = int(opts[OPTION_MAX_CHANGES]) if opts.get(OPTION_MAX_CHANGES) else None
            if max_changes is not None and max_changes < 1:
                raise ValueError("maxChangesPerTrigger must be at least 1")
            pin_hours = float(opts.get(OPTION_FEED_PIN_HOURS, FEED_PIN_HOURS))
            if not 0 < pin_hours <= 24 * 365:
                raise ValueError("feedPinHours must be above 0 and at most a year")
        except (ValueError, ConfigError) as e:
            raise ConfigError(f"change feed options: {e} (startingVersion: a seq, latest or snapshot; "
                              f"startingTimestamp: Unix seconds or ISO 8601; endingVersion: a seq; "
                              f"maxChangesPerTrigger: a positive integer; feedPinHours: hours)") from e
        return cls(start, start_time, end, max_changes, opts.get(OPTION_FEED_NAME) or None, pin_hours)


def _unix_seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        at = dt.datetime.fromisoformat(text)
        return (at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)).timestamp()


@dataclass(frozen=True)
class ChangePartition(InputPartition):
    """Everything a task needs to read the changes in (start, end] (no config file)."""

    metadata: str
    warehouse: str
    object_store: object
    table_id: int
    start: int
    end: int
    snapshot: bool  # the table's rows at `start` first, as inserts
    window_s: float
    pinned_from: int | None = None  # a named feed's lease (below the window: see check_range)
    reset: bool = False  # `start` lies before the table's copy: a truncate marker and the copy first


class _Feed:
    """The table a feed reads and what the driver knows of it (config, lease settings)."""

    def __init__(self, options, schema):
        from htap.pushdown.datasource import ScanOptions, open_scan
        from htap.pushdown.source_reader import check_access

        self.schema = schema
        self.opts = ScanOptions.parse({k: v for k, v in options.items() if k.lower() not in OPTIONS})
        self.feed = FeedOptions.parse(options)
        cfg, store, table = open_scan(self.opts)
        try:
            source = cfg.source(self.opts.source)
            role = self.opts.reader_role(cfg, source)
            if role:
                denied = check_access(source, role, table, list(table.arrow_schema.names))
                if denied:
                    from htap.pushdown.datasource import PERMISSION_MARKER

                    raise PermissionError(f"{PERMISSION_MARKER}: {denied}: the replica never widens access")
        finally:
            store.close()
        self.cfg, self.table_id = cfg, table.id

    def store(self):
        from htap.replica.metadata import MetadataStore

        return MetadataStore(self.cfg.metadata)

    def safe_seq(self) -> int:
        """The replica's seq of the table now (an error while it is not readable)."""
        seq = self.readable_seq()
        if seq is None:
            from htap.replica.read_plans import OutsideWindow

            with self.store() as store:
                table = store.table_by_id(self.table_id)
            raise OutsideWindow(f"{table.qualified_name} is not readable now (state: {table.state}); its changes neither")
        return seq

    def readable_seq(self) -> int | None:
        """The replica's seq of the table now; None while it is not readable (being copied again)."""
        with self.store() as store:
            table = store.table_by_id(self.table_id)
        return table.max_safe_seq if table.readable else None

    def start_seq(self, default: str) -> tuple[int, bool]:
        """The seq the feed starts after, and whether it starts with the rows at that seq."""
        feed = self.feed
        if feed.start_time is not None:
            from htap.replica.read_plans import seq_for_time

            with self.store() as store:
                return seq_for_time(store, store.table_by_id(self.table_id), feed.start_time), False
        start = feed.start if feed.start is not None else default
        if start in (LATEST, SNAPSHOT):
            return self.safe_seq(), start == SNAPSHOT
        return int(start), False

    def seq_within(self, start: int, budget: int, latest: int) -> int:
        from htap.replica.changes import seq_within
        from htap.replica.warehouse import open_warehouse

        with self.store() as store:
            return seq_within(store, open_warehouse(self.cfg), store.table_by_id(self.table_id), start, budget, latest)

    def partition(self, start: int, end: int, snapshot: bool) -> ChangePartition:
        """The task of the range, leased from the driver (checked against the window first). A
        named feed moves its own lease to the range's start: it keeps what the feed reads next
        (this range, again if the query restarts) for feedPinHours, even below the window."""
        from htap.replica.changes import check_range, feed_holder, feed_pin

        name = self.feed.name
        with self.store() as store:
            table = store.table_by_id(self.table_id)
            # Copied again since the feed's start (or it starts before the first copy): what was
            # before the copy is gone; the feed resets to it (a marker, the copy's rows) and goes on.
            reset = table.copy_seq is not None and start < table.copy_seq <= end and not snapshot
            if reset:
                start = table.copy_seq
            pinned = feed_pin(store, table, name) if name else None
            check_range(store, table, start, end, self.cfg.window_s, pinned)
            if name:
                store.move_pin(table.id, start, self.feed.pin_hours * 3600.0, feed_holder(name))
                pinned = start
            else:
                store.lease(table.id, start, self.cfg.pin_ttl_s)
        return ChangePartition(
            metadata=self.opts.executor_metadata or str(self.cfg.metadata), warehouse=str(self.cfg.warehouse),
            object_store=self.cfg.object_store, table_id=self.table_id, start=start, end=end, snapshot=snapshot,
            window_s=self.cfg.window_s, pinned_from=pinned, reset=reset,
        )


def read_partition(partition: ChangePartition) -> Iterator:
    """The task: the range's change rows as Arrow batches (read-only metadata, no lease taken)."""
    from htap.replica.changes import read_changes, reset_to_copy, snapshot_inserts
    from htap.replica.metadata import MetadataStore
    from htap.replica.warehouse import open_warehouse_at

    warehouse = open_warehouse_at(partition.warehouse, partition.object_store)
    with MetadataStore(partition.metadata, read_only=True) as store:
        table = store.table_by_id(partition.table_id)
        if partition.reset:
            if table.copy_seq != partition.start:
                from htap.replica.read_plans import OutsideWindow

                raise OutsideWindow(f"{table.qualified_name} was copied again while this change feed read it: run it again")
            yield from reset_to_copy(store, warehouse, table, partition.window_s).to_batches()
        if partition.snapshot:
            yield from snapshot_inserts(store, warehouse, table, partition.start, partition.window_s,
                                        partition.pinned_from).to_batches()
        if partition.end > partition.start:
            yield from read_changes(store, warehouse, table, partition.start, partition.end, partition.window_s,
                                    lease_s=None, pinned_from=partition.pinned_from).to_batches()


def change_ddl(store, source: str, schema: str, table: str) -> str:
    """The Spark DDL of a table's change feed."""
    from htap.pushdown.spark_types import spark_ddl
    from htap.replica.changes import change_schema

    return spark_ddl(change_schema(store.get_table(source, schema, table)))


class ChangeFeedReader(DataSourceReader):
    """A batch read of the changes in (start, end]."""

    def __init__(self, options, schema):
        feed = _Feed(options, schema)
        start, snapshot = feed.start_seq(default=SNAPSHOT)
        end = feed.feed.end if feed.feed.end is not None else feed.safe_seq()
        self._partition = feed.partition(start, max(start, end), snapshot)

    def partitions(self) -> list[InputPartition]:
        return [self._partition]

    def read(self, partition: ChangePartition) -> Iterator:
        yield from read_partition(partition)


class ChangeFeedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of changes; offsets {"seq": n} (and "snapshot": the rows at n come first).
    With maxChangesPerTrigger a micro-batch ends at the last seq that keeps it within that many
    row versions (a bigger transaction is one micro-batch of its own).

    A start that depends on when it is asked (latest, snapshot, a time) is the marker
    {"seq": null} until the first micro-batch resolves it into its end offset ({"from": seq}),
    which Spark writes to its offset log before the batch runs: Spark asks for the initial offset
    again when it runs that batch (and after a restart before the batch committed), and a start
    read anew each time made the snapshot and the next batch's changes overlap."""

    def __init__(self, options, schema):
        self.feed = _Feed(options, schema)
        self.target: int | None = None  # Trigger.AvailableNow: the seq the query ends at

    def initialOffset(self) -> dict:
        feed = self.feed.feed
        if feed.start_time is None and feed.start not in (None, LATEST, SNAPSHOT):
            return {"seq": int(feed.start), "snapshot": False}
        return {"seq": None, "snapshot": feed.start == SNAPSHOT}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        budget = self.feed.feed.max_changes
        return ReadMaxRows(budget) if budget else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.feed.safe_seq()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        start = start if start is not None else self.initialOffset()
        latest = self.feed.readable_seq() if self.target is None else self.target
        if latest is None:  # being copied again: nothing new until it is readable (then a reset)
            return start
        begin = start["seq"]
        if begin is None:  # the first micro-batch: where the feed starts, resolved once
            begin = min(self.feed.start_seq(default=LATEST)[0], latest)
        if isinstance(limit, ReadMaxRows) and latest > begin:
            latest = self.feed.seq_within(begin, limit.max_rows, latest)
        end = {"seq": max(latest, begin), "snapshot": False}
        return end if start["seq"] is not None else {**end, "from": begin}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = start["seq"] if start["seq"] is not None else end["from"]
        if begin >= end["seq"] and not start.get("snapshot"):
            return []
        return [self.feed.partition(begin, max(begin, end["seq"]), bool(start.get("snapshot")))]

    def read(self, partition: ChangePartition) -> Iterator:
        yield from read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: a range's lease expires on its own (pin_ttl_s after the last read)."""
