"""One exception hierarchy for spark-htap.

Every error says what is wrong and what to do about it, in one line, because it is what a user
sees on the command line, in a Spark error, or in the service log.
"""


class HtapError(Exception):
    """Root of every error spark-htap raises on purpose."""


class ConfigError(HtapError):
    """The configuration is missing, malformed, or names an unknown key."""


class SourceError(HtapError):
    """The source database cannot be reached or is not set up for CDC."""


class TableError(HtapError):
    """A table cannot be (or is not) an HTAP table: unknown, no primary key, unsupported type."""


class MovedKeyValuesUnknown(TableError):
    """An update changed a row's key and left values unchanged (unchanged TOAST), and the old
    key's values are not known to the replica: storing NULL would be silent data loss."""

    def __init__(self, table: str, moved: str, why: str):
        super().__init__(
            f"{table}: an update moved key {moved} leaving values unchanged (unchanged TOAST), but {why}: those "
            f"values cannot be known; copy the table again (htap tables resync) or set REPLICA IDENTITY FULL on the "
            f"source table")


class NoSuchTableError(TableError):
    """The table is not an HTAP table of this catalog."""


class ReplicaError(HtapError):
    """The replica store is damaged or inconsistent (missing or corrupt delta file, metadata)."""


class DamagedReplicaError(ReplicaError):
    """A delta file is missing or corrupt: the only reason a read marks its table unhealthy."""


# Every error of a damaged table starts with this (htap.replica.health tells damage from other
# reasons a table is unhealthy by it).
DAMAGE_PREFIX = "damaged replica: "


class WarehouseError(ReplicaError):
    """The warehouse (a local folder or an object store) cannot be used: not a damaged file,
    so it never marks a table unhealthy."""


class WarehouseUnavailableError(WarehouseError):
    """The object store did not answer (network, timeouts, throttling) after every retry.
    Nothing was confirmed to the source: the service retries the checkpoint later."""


class WarehouseAccessError(WarehouseError):
    """The object store refused the request (credentials, bucket missing, permissions): retrying
    cannot help; the message names the setting to fix."""


class AccessError(HtapError):
    """A read was refused: no credentials where `access.mode = "login"` asks for them, or the
    source refused the login. Never carries a password."""


class InternalQueryError(HtapError):
    """A query spark-htap generated itself failed on intact data: a bug in spark-htap, never
    damage, so it fails the query but leaves the table's health alone."""


class QueryValueError(HtapError):
    """A pushed query raised on a value of the data — an overflow, a division by zero — where
    Spark's ANSI mode raises over the same rows too: the query's answer, not a bug or damage."""


class ShimBuildError(HtapError):
    """The Java catalog shim could not be compiled (no JDK, no pyspark jars)."""


class PoisonError(TableError):
    """A value the replica cannot store in its column's replica type.

    Only the value's table fails (state `failed`); the rest of its source goes on. The ingest
    service adds where it happened (source, table, seq) to the message it records.
    """

    MAX_VALUE_CHARS = 120

    def __init__(self, column: str | None, value: object, reason: str, row: int | None = None, seq: int | None = None):
        self.column = column
        self.value = value
        self.reason = reason
        self.row = row  # index of the value in the decoded batch
        self.seq = seq  # the commit sequence of the change that carried it, when known
        super().__init__(self.describe())

    @property
    def value_text(self) -> str:
        import decimal

        v = self.value
        if isinstance(v, decimal.Decimal):
            text = format(v, "f")
        elif hasattr(v, "isoformat"):
            text = v.isoformat()
        else:
            text = repr(v)
        if len(text) > self.MAX_VALUE_CHARS:
            text = text[: self.MAX_VALUE_CHARS] + f"... ({len(text)} characters)"
        return text

    def describe(self) -> str:
        where = f"column {self.column}" if self.column else "a column"
        return f"{where}: value {self.value_text} cannot be stored: {self.reason}"
