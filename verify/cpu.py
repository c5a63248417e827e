"""CPU time of process trees, from /proc (Linux): Spark's JVM and the Postgres server.

A tree's CPU is user + system time of every live process in it, plus the time of children that
already exited and were reaped by a process in the tree (the kernel adds it to the parent's
cutime/cstime). So a Postgres backend that served one query and exited still counts: the
postmaster reaped it. Measurements are deltas over a query's run and include whatever else the
tree did meanwhile (for Postgres: autovacuum, the WAL sender of the ingest service, other
clients), so they are meant for comparing the two sides on a quiet server, not for accounting.
"""

from __future__ import annotations

import os
from pathlib import Path

from htap.connectors.queryable import QueryableSource

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, own + reaped children's CPU seconds) of a process, None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / _TICK


def available() -> bool:
    return (PROC / "self" / "stat").is_file()


def tree_cpu_s(root: int) -> float | None:
    """CPU seconds of `root` and all its live descendants (None without /proc or root)."""
    if not available():
        return None
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        s = _stat(int(entry.name))
        if s is not None:
            parents[int(entry.name)], cpu[int(entry.name)] = s
    if root not in cpu:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def parent_of(pid: int) -> int | None:
    s = _stat(pid)
    return None if s is None else s[0]


class SourceCpu:
    """CPU of a local source server's process tree (Postgres: postmaster and every backend;
    MySQL/MariaDB: the one server process)."""

    method = "/proc: the source server's process tree (backends included, exited ones via cutime/cstime)"

    def __init__(self, source: QueryableSource):
        self.postmaster: int | None = None
        self.reason: str | None = None
        process = source.server_process()
        if not available():
            self.reason = "no /proc on this machine"
        elif isinstance(process, str):
            self.reason = process
        else:
            self.postmaster = process

    def read(self) -> float | None:
        return None if self.postmaster is None else tree_cpu_s(self.postmaster)


class SparkCpu:
    """CPU of the Spark driver JVM's process tree (local mode: executors and Python workers too)."""

    method = "/proc: the Spark JVM's process tree (driver, local executors, Python workers and planners)"

    def __init__(self, spark):
        self.pid: int | None = None
        self.reason: str | None = None
        try:
            self.pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        except Exception as e:  # noqa: BLE001 - e.g. Spark Connect has no local JVM
            self.reason = f"no local Spark JVM: {e}"
        if self.pid is not None and not available():
            self.pid, self.reason = None, "no /proc on this machine"

    def read(self) -> float | None:
        return None if self.pid is None else tree_cpu_s(self.pid)
