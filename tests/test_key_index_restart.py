"""Issue 13: the service stores each partition's key index on local disk when it stops, and a
restart reads it instead of building it from the deltas (htap.replica.keyindex_file); a stored
index that is damaged (truncated, bytes flipped, another partition's) is rebuilt, one from an
older state is caught up with the deltas added since, a service killed with -9 starts with
whatever intact index is there or rebuilds; the replica stays equal to the source throughout
(`htap verify data`)."""

from __future__ import annotations

import re
import shutil
import signal

from conftest import tune, wait_until
from test_verify_data import verify

from htap.conf import load_config
from htap.replica import keyindex_file
from htap.replica.deltas import partition_dir
from htap.replica.warehouse import open_warehouse

USED = re.compile(r"key index of (\S+): the stored one used")
REBUILT = re.compile(r"key index of (\S+): rebuilt from \d+ deltas in [\d.]+ s \(([^)]*)")
CAUGHT_UP = re.compile(r"key index of (\S+): the stored one caught up")


def session(ws, since: int, rounds: int = 1) -> str:
    """Start the service, change rows of every partition, wait until the replica has them, and
    return the log this run wrote (the first checkpoints open every partition's index)."""
    ws.start_service()
    for r in range(rounds):
        ws.sql(f"UPDATE {ws.schema}.t SET v = v || '+' WHERE id % 7 = {r % 7}")
        ws.sql(f"DELETE FROM {ws.schema}.t WHERE id % 97 = {r}")
        ws.wait_caught_up("t")
    return ws.log()[since:]


def test_a_restart_reads_the_stored_indexes_and_rebuilds_damaged_ones(workspace):
    ws = workspace
    tune(ws, compaction_interval_s=0.0, partition_rows=400)  # five partitions; the deltas stay as written
    ws.sql(f"CREATE TABLE {ws.schema}.t (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {ws.schema}.t SELECT g, 'v' || g FROM generate_series(1, 2000) g")
    ws.htap("tables", "add", f"{ws.schema}.t")
    ws.start_service()
    ws.wait_readable("t")
    ws.sql(f"UPDATE {ws.schema}.t SET v = 'first' WHERE id % 5 = 0")
    ws.wait_caught_up("t")
    ws.stop_service()  # a clean stop stores every partition's index (the ones the background writer has not)

    cfg = load_config(ws.config)
    table = ws.table("t")
    folders = [open_warehouse(cfg).lock_dir(partition_dir(table, p)) for p in table.layout.ids]
    files = [keyindex_file.path_of(f) for f in folders]
    assert len(files) == 5 and all(f.is_file() for f in files)
    older = files[3].read_bytes()

    mark = len(ws.log())
    text = session(ws, mark)
    assert sorted(USED.findall(text)) == sorted(map(str, folders)), text  # every one read, none rebuilt
    assert not REBUILT.findall(text)
    verify(ws, check_rc=0)

    ws.stop_service()
    raw = files[0].read_bytes()
    files[0].write_bytes(raw[: len(raw) // 2])  # truncated
    raw = files[1].read_bytes()
    files[1].write_bytes(raw[:100] + bytes([raw[100] ^ 0xFF]) + raw[101:])  # a byte flipped
    shutil.copyfile(files[4], files[2])  # another partition's
    files[3].write_bytes(older)  # from an older state (before the last run's deltas)
    mark = len(ws.log())
    text = session(ws, mark, rounds=2)
    rebuilt = dict(REBUILT.findall(text))
    assert rebuilt == {str(folders[0]): "the stored one is damaged", str(folders[1]): "the stored one is damaged",
                       str(folders[2]): "the stored one is damaged"}, text
    assert "checksum mismatch" in text and "truncated" in text and "written for" in text
    assert sorted(USED.findall(text)) == sorted([str(folders[3]), str(folders[4])])
    caught_up = rf"key index of {re.escape(str(folders[3]))}: the stored one used \(\d+ keys; [1-9]\d* deltas added"
    assert re.search(caught_up, text), "the older index catches up with the deltas added since"
    verify(ws, check_rc=0)

    # kill -9 while the service maintains the indexes: the next start reads or rebuilds them.
    ws.sql(f"UPDATE {ws.schema}.t SET v = 'killed' WHERE id % 3 = 0")
    wait_until(lambda: "checkpoint at seq" in ws.log()[mark:], None, "a checkpoint")
    ws.stop_service(signal.SIGKILL)
    mark = len(ws.log())
    text = session(ws, mark, rounds=3)
    opened = set(USED.findall(text)) | set(CAUGHT_UP.findall(text)) | {folder for folder, _ in REBUILT.findall(text)}
    assert opened == set(map(str, folders)), text
    verify(ws, check_rc=0)
