"""The deletion vectors' parsed footers and sidecars (htap.replica.dv._ParsedFiles): a file read
again is not parsed again, but a file that changed since (damaged, rewritten) always is, and the
cache keeps to its budget."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from htap.replica import dv


def _counting(parse):
    calls = []

    def counted(path):
        calls.append(path)
        return parse(path)

    return counted, calls


def test_a_file_is_parsed_once_until_it_changes(tmp_path):
    cache = dv._ParsedFiles(budget=100)
    f = tmp_path / "a"
    f.write_bytes(b"one")
    parse, calls = _counting(lambda p: (p.read_bytes(), 1))
    assert cache.get(f, parse) == b"one"
    assert cache.get(f, parse) == b"one"
    assert len(calls) == 1
    f.write_bytes(b"three")  # another size
    assert cache.get(f, parse) == b"three"
    st = os.stat(f)
    f.write_bytes(b"THREE")  # the same size, and the same modification time as before
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.get(f, parse) == b"three"  # unchanged by every stamp: an immutable file's promise
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert cache.get(f, parse) == b"THREE"
    assert len(calls) == 3
    f.unlink()
    try:
        cache.get(f, parse)
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a file gone must not be answered from the cache")


def test_the_least_recently_used_files_leave_beyond_the_budget(tmp_path):
    cache = dv._ParsedFiles(budget=10)
    parse, calls = _counting(lambda p: (p.name, 4))
    files = [tmp_path / name for name in "abc"]
    for f in files:
        f.write_bytes(b"x")
    cache.get(files[0], parse)
    cache.get(files[1], parse)
    cache.get(files[0], parse)  # a is now the most recently used
    cache.get(files[2], parse)  # 12 > 10: b leaves
    assert len(calls) == 3
    cache.get(files[0], parse)
    cache.get(files[2], parse)
    assert len(calls) == 3
    cache.get(files[1], parse)
    assert len(calls) == 4


def test_a_sidecar_answers_every_seq_from_one_parse(tmp_path):
    entries = pa.table({
        "target": ["d1", "d1", "d2", "d1", "d2"],
        "row": pa.array([0, 5, 3, 7, 9], pa.int64()),
        "seq": pa.array([4, 2, 3, 6, 2], pa.int64()),
    })
    path = tmp_path / "x.parquet.dv"
    dv.write_sidecar(path, entries)
    parsed, weight = dv._read_sidecar(path)
    assert weight == 5
    total, at1 = parsed.at(1)
    assert total == 5 and at1 == {}
    total, at3 = parsed.at(3)
    assert {t: rows.tolist() for t, rows in at3.items()} == {"d1": [5], "d2": [3, 9]}
    _, at9 = parsed.at(9)
    assert {t: sorted(rows.tolist()) for t, rows in at9.items()} == {"d1": [0, 5, 7], "d2": [3, 9]}
    empty = tmp_path / "e.parquet.dv"
    dv.write_sidecar(empty, entries.slice(0, 0))
    parsed, _ = dv._read_sidecar(empty)
    assert parsed.at(10) == (0, {}) and parsed.codes.dtype == np.int32
