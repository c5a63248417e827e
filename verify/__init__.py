"""Data verification and query replay (not built yet: see README, issue 6)."""
