"""The replica store: Parquet deltas, merge-on-read, compaction, the metadata store, snapshots."""
