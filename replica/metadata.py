"""The metadata store: HTAP tables, partitions, deltas, safe seqs, CDC positions, leases.

One store over one connection (htap.replica.metadata_db: the schema, SQLite or Postgres, the
transactions), its methods grouped by concern in their own modules: tables and partition layouts
(metadata_tables), deltas and checkpoints (metadata_deltas), leases and query snapshots
(metadata_leases), sources, positions and services (metadata_sources), scan records
(metadata_records), derived views (metadata_views). Calls of several parts join one transaction (`transaction()`): a checkpoint's
deltas, safe seqs and position; a scan's snapshot, window, lease and routing record.
"""

from __future__ import annotations

from htap.replica.metadata_db import SCHEMA_VERSION, redact_url
from htap.replica.metadata_deltas import SAFE_POINT_EVERY_S, DeltaRecords, NewDelta
from htap.replica.metadata_leases import QUERY_READS_SOURCE, LeaseRecords, Pin, holder_id
from htap.replica.metadata_records import ScanRecord, ScanRecords
from htap.replica.metadata_sources import SERVICE_BEAT_S, SERVICE_STALE_S, SourceRecords, running_services
from htap.replica.metadata_tables import TableRecords
from htap.replica.metadata_views import ViewInfo, ViewRecords
from htap.replica.models import Delta

__all__ = [
    "QUERY_READS_SOURCE", "SAFE_POINT_EVERY_S", "SCHEMA_VERSION", "SERVICE_BEAT_S", "SERVICE_STALE_S", "Delta",
    "MetadataStore", "NewDelta", "Pin", "ScanRecord", "ViewInfo", "holder_id", "redact_url", "running_services",
]


class MetadataStore(ViewRecords, TableRecords, DeltaRecords, LeaseRecords, SourceRecords, ScanRecords):
    """Repository over the metadata database. Cheap to open; one per thread or process."""

    def __enter__(self) -> "MetadataStore":
        return self
