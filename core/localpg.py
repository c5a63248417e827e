"""A private, throwaway Postgres cluster (initdb + pg_ctl) for the demo and for tests.

Used when the machine's Postgres is not set up for logical replication (the demo), or when a
test needs a server with other settings (e.g. wal_level=replica). Runs as the `postgres` OS user
when invoked as root, because initdb refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from htap.errors import SourceError


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise SourceError("no Postgres server binaries (initdb) found: install postgresql, or pass --dsn of a server with wal_level=logical")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True)


DEFAULT_SETTINGS = {"wal_level": "logical", "max_replication_slots": "16", "max_wal_senders": "16"}


def start(data_dir: Path, port: int, wal_level: str | None = None, settings: dict[str, str] | None = None) -> str:
    """Create (once) and start a cluster in `data_dir` on 127.0.0.1:`port`; returns its DSN.

    `settings` are server settings (`-c name=value`) on top of DEFAULT_SETTINGS."""
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    if wal_level:
        settings["wal_level"] = wal_level
    bindir = _bindir()
    data_dir = data_dir.resolve()
    if not (data_dir / "PG_VERSION").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data_dir, "postgres", "postgres")
        r = _run([str(bindir / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        if r.returncode != 0:
            raise SourceError(f"initdb failed in {data_dir}: {r.stderr.strip()}")
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={data_dir} " + " ".join(
        f"-c {name}={value}" for name, value in settings.items()
    )
    r = _run([str(bindir / "pg_ctl"), "-D", str(data_dir), "-o", opts, "-l", str(data_dir / "server.log"), "-w", "start"])
    if r.returncode != 0 and "another server might be running" not in (r.stderr + r.stdout):
        raise SourceError(f"could not start Postgres in {data_dir}: {r.stderr.strip() or r.stdout.strip()}")
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    deadline = time.monotonic() + 30
    import psycopg2

    while True:
        try:
            psycopg2.connect(dsn).close()
            return dsn
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise SourceError(f"Postgres in {data_dir} did not accept connections; see {data_dir / 'server.log'}")
            time.sleep(0.2)


def running(data_dir: Path) -> bool:
    """Whether a server runs on the cluster in `data_dir` (`pg_ctl status`: 0 running, 3 not)."""
    if not (data_dir / "PG_VERSION").exists():
        return False
    return _run([str(_bindir() / "pg_ctl"), "-D", str(data_dir.resolve()), "status"]).returncode == 0


def stop(data_dir: Path) -> None:
    _run([str(_bindir() / "pg_ctl"), "-D", str(data_dir.resolve()), "-m", "fast", "-w", "stop"])
