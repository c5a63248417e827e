"""Verification: prove the replica right, in CI.

- `htap verify data` (data.py): every row of the source against the replica at one exact
  snapshot (snapshot.py), by key ranges with checksums over one canonical row form
  (canonical.py); differences by key; GX-layout validation results (expectations.py).
- `htap verify replay` (replay.py): a query log through Spark on the replica and on the source
  at one snapshot, compared; latency and CPU of both sides (cpu.py); JSON and JUnit XML.
"""
