"""The CLI's environment: a private Postgres in a temporary folder, a spark-htap workspace
(`htap init`, `tables add`, `htap serve` in the background) and the waits for the replica
(readable, then caught up with the source). The test suite has its own fixtures for all of this
(tests/conftest.py, tests/workspace.py) and uses only the setup-independent parts of the
package."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from htap import localpg
from htap.conf import load_config
from htap.replica.metadata import MetadataStore
from htap.seq import lsn_to_int

from fuzz.source import connect

# The settings CDC needs, as tests/services.py starts its private Postgres.
PG_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "max_connections": "100",
    "fsync": "off",
    "full_page_writes": "off",
    "checkpoint_timeout": "1h",
}
SOURCE = "fz"
DATABASE = "fz"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def current_lsn(dsn: str) -> int:
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()")
            return lsn_to_int(cur.fetchone()[0])
    finally:
        conn.close()


@dataclass
class Environment:
    """A private Postgres (database `fz`, tables in `public`) and a spark-htap workspace over it,
    all under `root` (a temporary folder unless given)."""

    root: Path
    keep: bool = False
    dsn: str = ""
    config: Path = field(default=Path())
    service: subprocess.Popen | None = None
    _pg_dir: Path | None = None

    @classmethod
    def start(cls, root: Path | None = None, keep: bool = False) -> "Environment":
        root = Path(root or tempfile.mkdtemp(prefix="htap-fuzz-")).resolve()
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)  # as root, Postgres runs as its own OS user and must enter the folder
        env = cls(root, keep)
        env._pg_dir = root / "pg"
        admin = localpg.start(env._pg_dir, port=free_port(), settings=PG_SETTINGS)
        conn = connect(admin)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
        conn.close()
        env.dsn = admin.replace("dbname=postgres", f"dbname={DATABASE}")
        env.config = root / "htap" / "htap.toml"
        env.config.parent.mkdir(exist_ok=True)
        log(f"fuzz: private Postgres {env.dsn}; workspace {env.config.parent}")
        return env

    def htap(self, *args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "htap.app.cli", "--config", str(self.config), *args],
                           capture_output=True, text=True, cwd=self.config.parent)
        if r.returncode != 0:
            raise RuntimeError(f"htap {' '.join(args)} failed ({r.returncode}): {r.stderr}{r.stdout}")
        return r.stdout

    def replicate(self, tables: list[str], timeout_s: float = 300, partition_rows: int | None = None) -> None:
        """`htap init`, `tables add` for each of `tables` (in schema public), `htap serve`; wait
        until every table is readable. `partition_rows`: the replica's target rows per partition
        (small: tables of a few hundred rows in several partitions, so work splits by them)."""
        self.htap("init", "--dsn", self.dsn, "--source", SOURCE, "--warehouse", "wh")
        if partition_rows:
            text = self.config.read_text()
            if not re.search(r"(?m)^partition_rows = ", text):
                raise RuntimeError(f"{self.config} has no partition_rows line to set")
            self.config.write_text(re.sub(r"(?m)^partition_rows = .*$", f"partition_rows = {partition_rows}", text))
        for t in tables:
            self.htap("tables", "add", f"public.{t}")
        out = open(self.config.parent / "serve.log", "ab")
        self.service = subprocess.Popen([sys.executable, "-m", "htap.app.cli", "--config", str(self.config), "serve"],
                                        stdout=out, stderr=subprocess.STDOUT, cwd=self.config.parent)
        self._wait(tables, lambda t: t.readable, "readable", timeout_s)

    def wait_caught_up(self, tables: list[str], timeout_s: float = 300) -> None:
        """Wait until every table's max safe seq covers everything the source committed so far
        (the current WAL position - 1, as tests/workspace.py)."""
        seq = current_lsn(self.dsn) - 1
        self._wait(tables, lambda t: (t.max_safe_seq or -1) >= seq, f"caught up to {seq}", timeout_s)

    def _wait(self, tables: list[str], ok, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with MetadataStore(load_config(self.config).metadata) as store:
                states = {t: store.get_table(SOURCE, "public", t) for t in tables}
            if all(s is not None and ok(s) for s in states.values()):
                return
            bad = [f"{t}: {s.state} {s.error}" for t, s in states.items()
                   if s is not None and s.state in ("failed", "unhealthy")]
            if bad or (self.service and self.service.poll() is not None) or time.monotonic() > deadline:
                tail = (self.config.parent / "serve.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"tables not {what}: {bad or states}; service log:\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the service and Postgres; remove the folder unless `keep`."""
        if self.service and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.service.kill()
                self.service.wait()
        self.service = None
        if self._pg_dir is not None:
            localpg.stop(self._pg_dir)
        if self.keep:
            log(f"fuzz: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
