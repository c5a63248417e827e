"""Ingest orchestration: the service that copies and streams each source into the replica.

It sits above both `connectors` (where changes come from) and `replica` (where they go), so
neither of those imports the other's orchestration.
"""
