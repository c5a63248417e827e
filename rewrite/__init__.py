"""The pushed plan (one IR for everything pushed) and its one renderer, for the replica engine and the sources."""
