"""MySQL / MariaDB as a source: checks, table description, consistent initial copy, binlog CDC.

CDC reads the binary log in ROW format with full row images through `mysql-replication`, as a
replica would (COM_BINLOG_DUMP from a file and position, with this source's `server_id`).

**Commit sequence.** `seq = (binlog file index << 32) | end position of the commit event`: the
XID event that ends an InnoDB transaction, the COMMIT query of a non-transactional one, or the
statement itself for DDL such as TRUNCATE. Binlog files are numbered in order (`mysql-bin.000042`
has index 42) and positions within a file stay below 4 GiB (`max_binlog_size` <= 1 GiB), and a
server writes each transaction contiguously at commit, so this is a total commit order as an
int64. The commit time is the commit event's timestamp. GTIDs were the alternative: MariaDB's
domain-server-seq is ordered only within one domain and MySQL's UUID:N sets are no order at all,
while file/position works on every server, with or without GTIDs. Positions belong to one server:
after a failover to another server, add the tables again.

**Resume.** Every seq this source produces, and every `Progress` seq (heartbeats, rotations), is
an event boundary: the position right after the last event it covers. `stream(from_seq)` asks
the server for the binlog from exactly that file and position, so the first transaction it
delivers is the first one after the durable position: nothing skipped, nothing read twice. When
nothing is durable yet the stream starts at the oldest copy position of its tables (or, with no
tables, at the server's current position). `confirm` has nothing to tell the server: the durable
position is the replica's own. Binlogs must be kept (`expire_logs_days` / `binlog_expire_logs_seconds`)
longer than the service may be down; a purged position is an error that says so.

**Transactions.** The seq is known only at the commit event, after the rows, so the stream
reads a whole transaction (spilling it to a temporary file when it is large) and
then emits `Begin(seq)`, its `RowChange`s and `Commit(seq)`. Updates carry the before image as
`old`, so key changes work. `TRUNCATE` statements become a `Truncate` in a transaction of their
own. A reader thread decodes while the service applies; `poll` takes from its queue.

**Heartbeats.** The server is asked for a heartbeat every `HEARTBEAT_S` seconds while idle; a
heartbeat (and a rotation, and the commit of a transaction that touched no HTAP table) carries
the position up to which everything has been sent, which becomes a `Progress`, so safe seqs keep
moving on an idle or busy-elsewhere server.

**Schema.** The binlog carries column types, not names (unless `binlog_row_metadata=FULL`): the
stream decodes a table's rows with the replica's column list (names, signedness, character
sets, enum and set values from `information_schema`) as long as the TableMap event's column
types agree with it. An `ALTER`/`DROP`/`RENAME` of an HTAP table (checked against
`information_schema` when the statement streams by) or a TableMap that no longer agrees emits
a `Relation` with the table's new columns; a column that kept its name but changed type is
reported as `name (now <type>)`.

**Initial copy.** MariaDB: `START TRANSACTION WITH CONSISTENT SNAPSHOT`, then
`SHOW STATUS LIKE 'binlog_snapshot_%'` gives the binlog position of exactly that snapshot with
no lock at all. MySQL: `FLUSH TABLES WITH READ LOCK` for the moment it takes to open the
snapshot and read `SHOW MASTER STATUS`, then `UNLOCK TABLES` (needs RELOAD). Rows are read with
a streaming cursor and turned into Arrow one column at a time. Tables must be InnoDB: other
engines have no consistent snapshot.
"""
