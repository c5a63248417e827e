"""A partition's key index (htap.replica.keyindex) on local disk: a cache, never the truth.

Why: building a 1M-key index from the deltas took 1-2 s under load, and a restart paid it in the
first checkpoint of every partition it wrote (holding up that checkpoint and every commit behind
it). Reading the stored arrays back takes ~50 ms.

Where: one file, `.keyindex`, in the partition's local lock folder
(htap.replica.warehouse.Warehouse.lock_dir: the partition's folder of a local warehouse, a
folder of the local cache for an object store), beside the lock files; names starting with a
dot are not deltas (htap.replica.repartition.collect_orphans leaves them).

What it holds: the index's arrays as one Arrow IPC stream, the deltas it `covers` (relative
paths: delta paths are never reused and deltas are immutable, so this names the metadata state
it reflects), the folder it was written for and how its keys were hashed. A header carries a
magic, the format version, the payload's length and its CRC-32.

How it is trusted: not at all until checked. `read` refuses a file that is truncated, whose
bytes do not match their CRC, of another format version or hash scheme, for other key columns
or another folder, or whose arrays are inconsistent (lengths, order, codes, a sample of hashes
recomputed); the caller then rebuilds from the deltas and logs why. Its coverage is checked at
first use like any index's (htap.replica.keyindex.KeyIndex.sync): deltas only added since are
read, any covered delta no longer live (a compaction since it was written, a checkpoint that
never committed) means a rebuild. Writes are atomic (a temporary file renamed over the old
one) and not fsynced: a torn or empty file after a power loss fails its CRC like any damage.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

FILE = ".keyindex"
FORMAT = 1
_MAGIC = b"HTAPKIX\0"
_HEADER = struct.Struct("<8sIIQ")  # magic, format, CRC-32 of the payload, payload length
_KEY = "key."  # prefix of the key columns in the payload (no clash with the arrays' names)
_ARRAYS = {"target": pa.int32(), "row": pa.int64(), "seq": pa.int64(), "h": pa.uint64(), "order": pa.int64()}
_SAMPLE = 256  # stored hashes recomputed at load


@dataclass(frozen=True)
class Stored:
    """An index's state as written: entries (`keys`, `target`, `row`, `seq`), sorted hashes `h`
    with the entry each belongs to (`order`), delta paths by code, and what it covers."""

    keys: pa.Table
    target: np.ndarray
    row: np.ndarray
    seq: np.ndarray
    h: np.ndarray
    order: np.ndarray
    paths: tuple[str, ...]
    covers: frozenset[str]
    folder: str
    scheme: str  # how keys were hashed (htap.replica.keyindex.hash_scheme)


def path_of(folder: Path) -> Path:
    return folder / FILE


def write(folder: Path, stored: Stored) -> int:
    """Store `stored` as the folder's index file (atomically); returns its size in bytes. The
    folder must exist (FileNotFoundError: the partition's lock folder is gone, and so is it)."""
    columns = {_KEY + name: stored.keys.column(name).combine_chunks() for name in stored.keys.column_names}
    for name, kind in _ARRAYS.items():
        columns[name] = pa.array(getattr(stored, name), kind)
    meta = {"covers": sorted(stored.covers), "paths": list(stored.paths), "folder": stored.folder,
            "scheme": stored.scheme}
    table = pa.table(columns).replace_schema_metadata({"htap.keyindex": json.dumps(meta)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload = sink.getvalue()
    header = _HEADER.pack(_MAGIC, FORMAT, zlib.crc32(payload), payload.size)
    tmp = folder / f"{FILE}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(payload)
    os.replace(tmp, path_of(folder))
    _sweep(folder)
    return _HEADER.size + payload.size


def _sweep(folder: Path) -> None:
    """Delete temporary files of writers that died mid-write (their process is gone)."""
    for tmp in folder.glob(f"{FILE}.*.tmp"):
        try:
            pid = int(tmp.name.split(".")[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, PermissionError, OSError):
            continue


def remove(folder: Path) -> None:
    path_of(folder).unlink(missing_ok=True)


def read(folder: Path, key_schema: pa.Schema, scheme: str,
         hashes: Callable[[pa.Table], np.ndarray]) -> Stored | str | None:
    """The folder's stored index if it is intact and made for `key_schema` hashed by `scheme`
    (`hashes` recomputes a sample of them); a string saying what is wrong with it; None if
    there is none."""
    try:
        raw = path_of(folder).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable ({e})"
    if len(raw) < _HEADER.size:
        return f"truncated ({len(raw)} bytes)"
    magic, version, crc, length = _HEADER.unpack_from(raw)
    if magic != _MAGIC:
        return "not a key index file"
    if version != FORMAT:
        return f"format version {version}, not {FORMAT}"
    payload = memoryview(raw)[_HEADER.size:]
    if len(payload) != length:
        return f"truncated ({len(payload)} of {length} payload bytes)"
    if zlib.crc32(payload) != crc:
        return "checksum mismatch"
    try:
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        meta = json.loads((table.schema.metadata or {})[b"htap.keyindex"])
        covers, paths = frozenset(meta["covers"]), tuple(meta["paths"])
        folder_name, stored_scheme = str(meta["folder"]), str(meta["scheme"])
    except (pa.ArrowException, KeyError, TypeError, ValueError) as e:
        return f"unparsable ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if folder_name != str(folder):
        return f"written for {folder_name}"
    if stored_scheme != scheme:
        return f"keys hashed by {stored_scheme}, not {scheme}"
    names = [n[len(_KEY):] for n in table.column_names if n.startswith(_KEY)]
    if any(n not in table.column_names for n in _ARRAYS):
        return "arrays missing"
    keys = table.select([_KEY + n for n in names]).rename_columns(names)
    if keys.schema != key_schema:
        return f"key columns {keys.schema.names} of other types or names than {key_schema.names}"
    arrays = {n: np.asarray(table.column(n).to_numpy()) for n in _ARRAYS}
    stored = Stored(keys, arrays["target"].copy(), arrays["row"].copy(), arrays["seq"].copy(), arrays["h"],
                    arrays["order"], paths, covers, folder_name, stored_scheme)
    return _inconsistency(stored, hashes) or stored


def _inconsistency(s: Stored, hashes: Callable[[pa.Table], np.ndarray]) -> str | None:
    """What makes the arrays unusable, if anything (a bug or damage the CRC cannot see)."""
    n = s.keys.num_rows
    if not (len(s.target) == len(s.row) == len(s.seq) == len(s.h) == len(s.order) == n):
        return "arrays of different lengths"
    if not n:
        return None
    if (s.h[1:] < s.h[:-1]).any():
        return "hashes not sorted"
    if s.order.min() < 0 or s.order.max() >= n or np.bincount(s.order, minlength=n).max() != 1:
        return "hash order is not a permutation of the entries"
    if s.target.min() < 0 or s.target.max() >= len(s.paths) or s.row.min() < 0:
        return "entries point nowhere"
    pick = np.unique(np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64))
    if not np.array_equal(hashes(s.keys.take(pa.array(s.order[pick]))), s.h[pick]):
        return "stored hashes differ from the keys' hashes"
    return None
