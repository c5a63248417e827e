"""The pushed-subplan model and its rendering as SQL for the replica engine and the sources."""
