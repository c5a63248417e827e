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


class NoSuchTableError(TableError):
    """The table is not an HTAP table of this catalog."""


class ReplicaError(HtapError):
    """The replica store is damaged or inconsistent (missing or corrupt delta file, metadata)."""


class ShimBuildError(HtapError):
    """The Java catalog shim could not be compiled (no JDK, no pyspark jars)."""
