"""The replica store: Parquet deltas, the metadata store and the ingest service."""
