"""Where the replica's bytes live: the one module that touches the warehouse's files.

A warehouse is a local folder or an object store (`s3://bucket/prefix`, any S3-compatible store,
through pyarrow.fs). Everything else names files by their path relative to the warehouse and
asks this module to store, fetch, list or delete them:

- Writers stage a file locally (`staging_path`), then `put` it: durable when `put` returns (a
  local file is fsynced and renamed into place; an object is uploaded and acknowledged by the
  store, with retries). Only then may a metadata transaction reference it, and only after that
  is anything confirmed to the source. `put` returns the file's checksum (SHA-256), which the
  metadata store keeps beside the delta.
- Readers ask for local copies of a set of files (`local`): a folder in which `<folder>/<rel>` is
  each file, so DuckDB reads local Parquet (its own S3 extension cannot be installed offline and
  would bypass the cache). For a local warehouse that folder is the warehouse itself. For an
  object store it is a per-read folder of hard links into a bounded local cache (least recently
  used files evicted past `cache_bytes`, as Redpanda's Shadow Indexing caches segments): a file
  is fetched once, verified against the checksum the metadata recorded, and a cached copy that
  no longer matches is fetched again, never trusted. The hard links keep a read's files alive
  while another process evicts them from the cache. Files the writer just uploaded enter its
  cache directly.

A file missing from the store stays missing in the read folder (the reader reports the damage);
an object whose bytes do not match their checksum raises DamagedReplicaError; a store that does
not answer raises WarehouseUnavailableError after `retries` attempts with exponential backoff,
and one that refuses (credentials, no such bucket) WarehouseAccessError — neither of which
marks a table damaged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, TypeVar

from htap.conf import CACHE_DIR_ENV, HtapConfig, ObjectStoreConfig, is_url
from htap.errors import (
    DAMAGE_PREFIX,
    ConfigError,
    DamagedReplicaError,
    WarehouseAccessError,
    WarehouseError,
    WarehouseUnavailableError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
CHUNK = 1 << 20
TMP_SUFFIX = ".tmp"
STALE_S = 24 * 3600.0  # staged files and read folders older than this were left by a crashed process


def checksum_of(path: Path) -> str:
    """SHA-256 of a local file, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fsync_path(path: Path) -> None:
    """fsync a file (its data) or a folder (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Warehouse(ABC):
    """Files of the replica by relative path (`<source>/<schema>.<table>-<id>/p0000/<uuid>.parquet`)."""

    location: str

    @abstractmethod
    def staging_path(self, rel: str) -> Path:
        """A fresh local path to write the future file `rel` at, before `put`."""

    @abstractmethod
    def put(self, rel: str, staged: Path) -> str:
        """Make the staged file durable as `rel` (it is consumed); returns its checksum."""

    @abstractmethod
    def put_bytes(self, rel: str, data: bytes) -> None:
        """A small object (manifests), durable when this returns; replaces an existing one."""

    @abstractmethod
    def get_bytes(self, rel: str) -> bytes | None:
        """A small object's bytes, or None if there is none."""

    @abstractmethod
    def exists(self, rel: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Relative paths of the files under `prefix` (a folder), sorted."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Delete a file; a missing one is fine."""

    @abstractmethod
    def delete_tree(self, prefix: str) -> None:
        """Delete every file under a folder."""

    @abstractmethod
    def local(self, files: Mapping[str, str | None]) -> contextlib.AbstractContextManager[Path]:
        """A local folder holding each of `files` (relative path -> checksum, None: unknown) at
        `<folder>/<rel>`, for the duration of the `with`; missing files stay missing."""

    @abstractmethod
    def lock_dir(self, rel: str) -> Path:
        """A local folder for the lock files of the warehouse folder `rel` (htap.replica.dv)."""

    @abstractmethod
    def scratch(self) -> Path:
        """A local folder for temporary files (the initial copy's spool)."""

    def create(self) -> None:
        """Make the warehouse usable (`htap init`)."""

    def unreachable(self) -> str | None:
        """Why the warehouse cannot be read now, or None: asked when a scan is planned, so it
        fails over to the source instead of failing in its tasks."""
        return None

    def url(self, rel: str) -> str:
        """Where `rel` lives, for messages."""
        return f"{self.location}/{rel}"


class LocalWarehouse(Warehouse):
    """A folder on a disk every reader shares (one machine, or a shared file system)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.location = str(self.root)

    def __repr__(self) -> str:
        return f"LocalWarehouse({self.root})"

    def staging_path(self, rel: str) -> Path:
        path = self.root / f"{rel}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def put(self, rel: str, staged: Path) -> str:
        # Written, fsynced, renamed, and the folder fsynced: a crash leaves at worst an
        # unreferenced file, never a reference to a file that is not fully on disk.
        digest = checksum_of(staged)
        fsync_path(staged)
        path = self.root / rel
        os.replace(staged, path)
        fsync_path(path.parent)
        return digest

    def put_bytes(self, rel: str, data: bytes) -> None:
        staged = self.staging_path(rel)
        staged.write_bytes(data)
        self.put(rel, staged)

    def get_bytes(self, rel: str) -> bytes | None:
        try:
            return (self.root / rel).read_bytes()
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def list(self, prefix: str = "") -> list[str]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self.root / prefix, ignore_errors=True)

    @contextlib.contextmanager
    def local(self, files: Mapping[str, str | None]) -> Iterator[Path]:
        yield self.root

    def lock_dir(self, rel: str) -> Path:
        return self.root / rel

    def scratch(self) -> Path:
        return self.root / "_tmp"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)


# --- object store ----------------------------------------------------------------------------

# Words of pyarrow's S3 errors (AWS SDK error names and curl's) that mean "try again".
_TRANSIENT = ("NETWORK_CONNECTION", "SLOW_DOWN", "SERVICE_UNAVAILABLE", "INTERNAL_FAILURE", "REQUEST_TIMEOUT",
              "THROTTLING", "curlCode", "Timeout", "timed out", "Connection refused", "connection",
              "Couldn't connect", "Empty reply", "error 500", "error 502", "error 503", "error 504")
_REFUSED = {
    "NO_SUCH_BUCKET": "the bucket does not exist: create it, or run `htap init` (creates it)",
    "ACCESS_DENIED": "access denied: check replica.s3_access_key_id / $AWS_ACCESS_KEY_ID and the bucket policy",
    "INVALID_ACCESS_KEY_ID": "unknown access key: check replica.s3_access_key_id / $AWS_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH": "wrong secret key: check replica.s3_secret_access_key / $AWS_SECRET_ACCESS_KEY",
    "InvalidAccessKeyId": "unknown access key: check replica.s3_access_key_id / $AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "wrong secret key: check replica.s3_secret_access_key / $AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "access denied: check the credentials and the bucket policy",
    "NoSuchBucket": "the bucket does not exist: create it, or run `htap init` (creates it)",
}


def _refusal(text: str) -> str | None:
    return next((hint for word, hint in _REFUSED.items() if word in text), None)


@dataclass(frozen=True)
class Retry:
    """Attempts and backoff of one object-store call (exponential, capped)."""

    attempts: int = 5
    first_s: float = 0.2
    max_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep

    def run(self, what: str, call: Callable[[], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except FileNotFoundError:
                raise
            except OSError as e:
                text = str(e)
                hint = _refusal(text)
                if hint is not None:
                    raise WarehouseAccessError(f"object store refused {what}: {hint} ({_first_line(text)})") from e
                transient = any(w in text for w in _TRANSIENT) or not text
                if not transient or attempt == self.attempts:
                    detail = _first_line(text)
                    if transient:
                        raise WarehouseUnavailableError(
                            f"object store unreachable: {what} failed {attempt} times ({detail}); check"
                            f" replica.s3_endpoint / $AWS_ENDPOINT_URL and the network"
                        ) from e
                    raise WarehouseError(f"object store error on {what}: {detail}") from e
                delay = min(self.max_s, self.first_s * 2 ** (attempt - 1))
                log.warning("object store: %s failed (%s), attempt %d of %d, again in %.1f s",
                            what, _first_line(text), attempt, self.attempts, delay)
                self.sleep(delay)
        raise AssertionError("unreachable")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no detail"


def s3_filesystem(opts: ObjectStoreConfig):
    """A pyarrow S3FileSystem from the config, else the standard AWS environment variables."""
    from pyarrow import fs as pafs

    endpoint = opts.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    kwargs: dict = {
        "region": opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "connect_timeout": opts.timeout_s,
        "request_timeout": opts.timeout_s,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),  # ours: logged, classified
        "allow_bucket_creation": True,
    }
    if endpoint:
        scheme, sep, host = endpoint.partition("://")
        if not sep:
            scheme, host = "https", endpoint
        if scheme not in ("http", "https"):
            raise ConfigError(f"replica.s3_endpoint = {endpoint!r}: use http://host:port or https://host")
        kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    if opts.access_key_id or opts.secret_access_key:
        if not (opts.access_key_id and opts.secret_access_key):
            raise ConfigError("replica.s3_access_key_id and replica.s3_secret_access_key go together: set both or neither")
        kwargs.update(access_key=opts.access_key_id, secret_key=opts.secret_access_key)
    return pafs.S3FileSystem(**kwargs)


class LocalCache:
    """A bounded folder of verified copies of warehouse files, shared by the processes of one
    machine that use the same folder. Recency is the file's access time (set on every use);
    eviction takes a folder-wide lock and removes the least recently used files past the limit.
    A copy is verified when it enters the cache and whenever its size or mtime changed since
    this process last verified it.

    Counters (this process's, since it started; `htap serve` exports them as `htap_cache_*`):
    hits, misses (a fetch from the store), refetched (a cached copy that failed its checksum),
    fetched_bytes (downloaded), evictions (files this process evicted)."""

    def __init__(self, root: Path, limit_bytes: int):
        self.root = root
        self.limit = limit_bytes
        self.files = root / "files"
        self._verified: dict[str, tuple[int, int, int]] = {}  # rel -> (inode, size, mtime_ns)
        self._lock = threading.Lock()
        self.hits = self.misses = self.refetched = self.fetched_bytes = self.evictions = 0

    def path(self, rel: str) -> Path:
        return self.files / rel

    def count(self, **by: int) -> None:
        """Add to counters (reads run on several threads)."""
        with self._lock:
            for name, n in by.items():
                setattr(self, name, getattr(self, name) + n)

    def staging(self) -> Path:
        folder = self.root / "staging"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{uuid.uuid4().hex}{TMP_SUFFIX}"

    def admit(self, rel: str, staged: Path, digest: str | None) -> Path:
        """Move a local file (verified or just written) into the cache as `rel`."""
        path = self.path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, path)
        self._remember(rel, path)
        self.evict(keep=path)
        return path

    def _remember(self, rel: str, path: Path) -> None:
        st = path.stat()
        with self._lock:
            self._verified[rel] = (st.st_ino, st.st_size, st.st_mtime_ns)

    def valid(self, rel: str, digest: str | None) -> bool:
        """Whether the cached copy of `rel` exists and matches `digest` (None: any copy)."""
        path = self.path(rel)
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        with self._lock:
            known = self._verified.get(rel)
        if known == (st.st_ino, st.st_size, st.st_mtime_ns) or digest is None:
            return True
        if checksum_of(path) == digest:
            self._remember(rel, path)
            return True
        log.warning("cached copy of %s does not match its checksum: discarded, fetching it again", rel)
        path.unlink(missing_ok=True)
        with self._lock:
            self._verified.pop(rel, None)
            self.refetched += 1
        return False

    def touch(self, rel: str) -> None:
        """Mark as recently used: the access time is the cache's recency (the mtime stays, so
        what `valid` remembers stays valid)."""
        with contextlib.suppress(FileNotFoundError):
            st = self.path(rel).stat()
            os.utime(self.path(rel), ns=(time.time_ns(), st.st_mtime_ns))

    def size(self) -> int:
        return sum(p.stat().st_size for p in self._entries())

    def _entries(self) -> list[Path]:
        if not self.files.is_dir():
            return []
        return [p for p in self.files.rglob("*") if p.is_file() and not p.name.endswith(TMP_SUFFIX)]

    def sweep(self, now: float | None = None) -> int:
        """Remove staged files and read folders a crashed process left behind (older than
        STALE_S: no live read or upload takes that long); returns how many."""
        now = time.time() if now is None else now
        removed = 0
        for folder in (self.root / "staging", self.root / "reads"):
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if now - entry.lstat().st_mtime > STALE_S:
                        if entry.is_dir():
                            shutil.rmtree(entry, ignore_errors=True)
                        else:
                            entry.unlink()
                        removed += 1
        return removed

    def evict(self, keep: Path | None = None) -> int:
        """Remove least recently used files until the cache fits its limit (never `keep`, the
        file just admitted, so a file larger than the limit can still be read); returns how many."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = []
            for p in self._entries():
                with contextlib.suppress(FileNotFoundError):
                    st = p.stat()
                    entries.append((max(st.st_atime_ns, st.st_mtime_ns), st.st_size, p))
            total = sum(size for _, size, _ in entries)
            evicted = 0
            for _, size, p in sorted(entries, key=lambda e: e[0]):
                if total <= self.limit:
                    break
                if p == keep:
                    continue
                p.unlink(missing_ok=True)  # a read holding a hard link keeps its copy
                total -= size
                evicted += 1
            self.count(evictions=evicted)
            return evicted
        finally:
            os.close(fd)


class ObjectStoreWarehouse(Warehouse):
    """`s3://bucket/prefix` through pyarrow's S3 file system, with a local cache in front."""

    def __init__(self, location: str, opts: ObjectStoreConfig, filesystem=None, retry: Retry | None = None):
        self.location = location.rstrip("/")
        self.base = self.location.split("://", 1)[1]  # bucket/prefix
        self.bucket = self.base.split("/", 1)[0]
        self.opts = opts
        self.fs = filesystem if filesystem is not None else s3_filesystem(opts)
        self.retry = retry or Retry(attempts=opts.retries)
        name = hashlib.sha1(self.location.encode()).hexdigest()[:12]
        cache_root = (opts.cache_dir or Path("cache")) / name
        try:
            cache_root.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # e.g. an executor that may not write beside the config file
            fallback = Path(tempfile.gettempdir()) / "spark-htap-cache" / name
            log.warning("cache folder %s unusable (%s): caching in %s; set replica.cache_dir or $HTAP_CACHE_DIR",
                        cache_root, e, fallback)
            cache_root = fallback
        self.cache = LocalCache(cache_root, opts.cache_bytes)
        self._probed: tuple[float, str | None] = (-1e9, None)
        self.cache.sweep()  # once per process: what crashed processes left

    def __repr__(self) -> str:
        return f"ObjectStoreWarehouse({self.location}, cache={self.cache.root})"

    def _key(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def staging_path(self, rel: str) -> Path:
        return self.cache.staging()

    def _upload(self, rel: str, staged: Path) -> str:
        digest = hashlib.sha256()

        def upload() -> None:
            digest.__init__()  # a retry starts over
            with open(staged, "rb") as f, self.fs.open_output_stream(self._key(rel)) as out:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            # closing the stream waits for the store's acknowledgement (raises otherwise)

        self.retry.run(f"upload of {self.url(rel)}", upload)
        return digest.hexdigest()

    def put(self, rel: str, staged: Path) -> str:
        digest = self._upload(rel, staged)
        self.cache.admit(rel, staged, digest)  # the writer's recently written files stay local
        return digest

    def put_bytes(self, rel: str, data: bytes) -> None:
        staged = self.cache.staging()
        staged.write_bytes(data)
        try:
            self._upload(rel, staged)
        finally:
            staged.unlink(missing_ok=True)

    def get_bytes(self, rel: str) -> bytes | None:
        def read() -> bytes:
            with self.fs.open_input_stream(self._key(rel)) as f:
                return f.read()

        try:
            return self.retry.run(f"read of {self.url(rel)}", read)
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        from pyarrow import fs as pafs

        info = self.retry.run(f"lookup of {self.url(rel)}", lambda: self.fs.get_file_info(self._key(rel)))
        return info.type == pafs.FileType.File

    def list(self, prefix: str = "") -> list[str]:
        from pyarrow import fs as pafs

        base = self._key(prefix.rstrip("/")) if prefix else self.base
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        infos = self.retry.run(f"listing of {self.location}/{prefix}", lambda: self.fs.get_file_info(selector))
        start = len(self.base) + 1
        return sorted(i.path[start:] for i in infos if i.type == pafs.FileType.File)

    def delete(self, rel: str) -> None:
        def delete() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self._key(rel))

        self.retry.run(f"delete of {self.url(rel)}", delete)
        self.cache.path(rel).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        for rel in self.list(prefix):
            self.delete(rel)
        shutil.rmtree(self.cache.path(prefix), ignore_errors=True)

    def fetch(self, rel: str, digest: str | None) -> bool:
        """Make sure the cache holds a verified copy of `rel`; False if the store has none."""
        if self.cache.valid(rel, digest):
            self.cache.count(hits=1)
            self.cache.touch(rel)
            return True
        self.cache.count(misses=1)
        staged = self.cache.staging()
        try:
            for attempt in (1, 2):
                got = hashlib.sha256()

                def download() -> None:
                    got.__init__()
                    with self.fs.open_input_stream(self._key(rel)) as f, open(staged, "wb") as out:
                        while chunk := f.read(CHUNK):
                            got.update(chunk)
                            out.write(chunk)

                try:
                    self.retry.run(f"download of {self.url(rel)}", download)
                except FileNotFoundError:
                    return False
                self.cache.count(fetched_bytes=staged.stat().st_size)
                if digest is None or got.hexdigest() == digest:
                    self.cache.admit(rel, staged, digest)
                    return True
                log.warning("download of %s does not match its checksum (attempt %d)", self.url(rel), attempt)
            raise DamagedReplicaError(
                f"{DAMAGE_PREFIX}object {self.url(rel)} does not match the checksum the metadata recorded for it"
                f" (sha256 {digest}); `htap tables recopy` rebuilds the table"
            )
        finally:
            staged.unlink(missing_ok=True)

    @contextlib.contextmanager
    def local(self, files: Mapping[str, str | None]) -> Iterator[Path]:
        folder = self.cache.root / "reads" / uuid.uuid4().hex
        folder.mkdir(parents=True)
        try:
            for rel, digest in files.items():
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                for _ in range(5):  # another process may evict between the fetch and the link
                    if not self.fetch(rel, digest):
                        break
                    try:
                        os.link(self.cache.path(rel), target)
                        break
                    except FileNotFoundError:
                        continue
                    except FileExistsError:
                        break
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def lock_dir(self, rel: str) -> Path:
        return self.cache.root / "locks" / rel

    PROBE_TTL_S = 5.0  # a probe's answer serves the scans planned in the next seconds

    def unreachable(self) -> str | None:
        """One lookup of the warehouse's folder, no retries; the answer is kept PROBE_TTL_S."""
        now = time.monotonic()
        if now - self._probed[0] < self.PROBE_TTL_S:
            return self._probed[1]
        try:
            self.fs.get_file_info(self.base)
            problem = None
        except OSError as e:
            problem = f"the object store of warehouse {self.location} is unreachable ({_first_line(str(e))})"
        self._probed = (now, problem)
        return problem

    def scratch(self) -> Path:
        return self.cache.root / "tmp"

    def create(self) -> None:
        from pyarrow import fs as pafs

        def create() -> None:
            if self.fs.get_file_info(self.bucket).type == pafs.FileType.NotFound:
                self.fs.create_dir(self.bucket)

        self.retry.run(f"creation of bucket {self.bucket}", create)
        self.cache.root.mkdir(parents=True, exist_ok=True)


_OPEN: dict[tuple, Warehouse] = {}
_OPEN_LOCK = threading.Lock()


def open_warehouse(cfg: HtapConfig) -> Warehouse:
    """The configured warehouse; one per process and configuration (its cache's verification
    memory and its S3 connections are shared by the process's reads)."""
    return _open(str(cfg.warehouse), cfg.object_store)


def open_warehouse_at(location: str, object_store: ObjectStoreConfig) -> Warehouse:
    """The warehouse at `location` with the driver's object-store settings, as a Spark task
    carries them (executors read no config file). `HTAP_CACHE_DIR` in the executor's environment
    puts its cache where that node wants it, instead of the driver's cache folder."""
    here = os.environ.get(CACHE_DIR_ENV)
    if here and is_url(location):
        object_store = dataclasses.replace(object_store, cache_dir=Path(here).resolve())
    return _open(location, object_store)


def _open(location: str, object_store: ObjectStoreConfig) -> Warehouse:
    if not is_url(location):
        return LocalWarehouse(Path(location))
    key = (location, object_store)
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = ObjectStoreWarehouse(location, object_store)
        return _OPEN[key]


def as_warehouse(where: "Warehouse | Path | str") -> Warehouse:
    """A Warehouse from a Warehouse or a local folder (tests and benchmarks pass folders)."""
    return where if isinstance(where, Warehouse) else LocalWarehouse(Path(where))
