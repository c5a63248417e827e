"""Debezium change events as a source: from a file or folder of events, or from Kafka topics.

Debezium (PostgreSQL or MySQL connector, JSON converter, with or without the `schema`/`payload`
wrapper) already did the CDC; this source decodes its events into the unified change model.

**Inputs.** `path`: a JSON-lines file, or a folder of them read in name order as one log (a
replay archive; lines appended to the last file are picked up). A line is either an event value
(`{"before":..., "after":..., "source":..., "op":...}`, possibly wrapped as
`{"schema":..., "payload":...}`, or `null` for a tombstone) or a Kafka record
`{"topic": ..., "key": ..., "value": ...}` (`payload` instead of `value` when it is a JSON string,
as `kcat -J` writes it), which also gives the record key. `bootstrap_servers`: a thin
kafka-python consumer of the data topics (`<topic_prefix>.<schema>.<table>`, or `topics`), the
transaction topic (`<topic_prefix>.transaction`) and the schema change topic (`<topic_prefix>`);
offsets are committed only on `confirm()`, and only up to records whose transactions are durable.

**Events.** op `c`/`r` (snapshot read) upsert `after`; `u` upserts `after` with `before` as the old
row (a key change: Debezium itself sends `d` + `c`); `d` deletes `before` (or the record key);
`t` is a truncate; `m` messages, heartbeats and tombstones (`null` values) are skipped. A value
equal to `__debezium_unavailable_value` (the connector's `unavailable.value.placeholder`; base64
of it for binary columns) is `UNSET`: a partial update, filled from the row's older version; in
a `c` (an insert has every value) it marks the new half of a key change, paired with the `d` of
the old key just before it into one change whose unset values are the old key's (unpaired: the
change is marked `inserted` and its table fails rather than guess).
Schema change events (`tableChanges`, MySQL's schema change topic) and events whose columns
differ from the table's become a `Relation` with the new column names.

**Transactions.** With `provide.transaction.metadata`, data events carry `transaction.id` and the
transaction topic has BEGIN/END markers: the events of one id (counted against END's per-table
`data_collections` counts, for the tables this replica follows, across topics, in `total_order`)
become one `Begin`..`Commit`, in END order. Without metadata, consecutive events of one source
transaction (`source.txId` for Postgres, `source.gtid` or else the binlog position for MySQL)
form one; snapshot reads at one position form one, streamed through as they arrive.

**Commit sequence (seq).** From the events' `source` block, so it is the same on every replay:
- MySQL: `(binlog file index << 32) | pos` (the file index is `mysql-bin.000042`'s 42), the
  highest of the transaction's events. Transactions occupy disjoint, increasing binlog ranges, so
  this orders them as they committed.
- Postgres: the highest of `source.lsn` and the last-commit LSN in `source.sequence`
  (`["<last commit lsn>", "<lsn>"]`, Debezium >= 1.6) over the transaction's events. Each
  transaction's events carry the previous commit's LSN, and every change LSN of a transaction is
  below its own commit LSN, so this increases strictly from one transaction to the next even when
  transactions interleave in the WAL. Without `sequence` (older Debezium) only change LSNs exist,
  which order transactions correctly only when they do not interleave.
A transaction whose seq is not above the previous one is an error (it would be applied under
an older version): the events are out of order or lack `source.sequence`.

**Resume.** `stream(from_seq)` reads the file again from its start (Kafka: from the committed
offsets) and drops every transaction with seq <= from_seq: nothing skipped, nothing twice.

**Initial copy.** Debezium's own snapshot (`op=r` events) is at the start of the events, so the
copy replays the events there are now (the file, or the topics from their earliest offsets) for
that one table and keeps the last version of each row, at the seq of the last complete
transaction; the stream applies what follows. So a table added later, after the stream has
passed its snapshot, is complete too. With no events yet the copy is empty at seq -1 and the
snapshot arrives through the stream. An initial snapshot still being written (no `last` record
yet) is not complete and stays out of the copy.

**Types.** A column's type is its Kafka Connect schema, kept as `<type>[ <logical name>][(p,s)]`
(e.g. `int64 io.debezium.time.MicroTimestamp`, `bytes org.apache.kafka.connect.data.Decimal(12,2)`);
`htap tables add` reads it from the first event of the table that carries a schema (so the JSON
converter needs `schemas.enable=true`), and the key from the record key (or a schema change
event's `primaryKeyColumnNames`). Later events may come without schemas.
"""
