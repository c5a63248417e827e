"""The changes of one transaction, held until its commit is known; large ones spill to disk."""

from __future__ import annotations

import pickle
import tempfile

SPILL_CHANGES = 50_000  # changes kept in memory before the rest goes to a temporary file


class TxnSpool:
    """An append-only, iterate-once list; past `spill_at` changes it pickles batches to a temp
    file. An item counts as `weight` changes (a batch of rows as its row count)."""

    def __init__(self, spill_at: int = SPILL_CHANGES):
        self.spill_at = spill_at
        self.items: list = []
        self.weight = 0  # changes in `items`
        self.file = None
        self.spilled = 0  # items in the file

    def __len__(self) -> int:
        return self.spilled + len(self.items)

    def append(self, item, weight: int = 1) -> None:
        self.items.append(item)
        self.weight += weight
        if self.weight >= self.spill_at:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="htap-txn-")
            pickle.dump(self.items, self.file, protocol=pickle.HIGHEST_PROTOCOL)
            self.spilled += len(self.items)
            self.items, self.weight = [], 0

    def close(self) -> None:
        """Forget everything (the transaction was aborted)."""
        if self.file is not None:
            self.file.close()
            self.file = None
        self.items, self.weight, self.spilled = [], 0, 0

    def __iter__(self):
        if self.file is not None:
            self.file.seek(0)
            while True:
                try:
                    batch = pickle.load(self.file)
                except EOFError:
                    break
                yield from batch
            self.file.close()
            self.file = None
        yield from self.items
