"""Who is reading: the source role whose privileges a scan is checked against.

`access.mode = "declared"` (conf/access.py): the catalog's `user` option, if any, is taken as
given. `access.mode = "login"`: every read must name a source role and prove it with its
password (catalog option `password`, or `password_file`, or the driver's environment variable
HTAP_SOURCE_PASSWORD); the driver logs in to the source as that role (a real connection,
closed at once) and remembers a success for `access.login_cache_s`. The password stays in the
planning worker's memory: it is never logged, never part of a message, never sent to executors
(they read what the driver planned), and only its SHA-256 keys the cache.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from htap.conf import HtapConfig, SourceConfig
from htap.connectors.registry import open_queryable
from htap.errors import AccessError

PASSWORD_ENV = "HTAP_SOURCE_PASSWORD"

_LOGINS: dict[tuple[str, str, str], tuple[str, float]] = {}  # (source, user, sha256) -> (role, valid until)
_LOGINS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Credentials:
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, user: str | None, password: str | None, password_file: str | None) -> "Credentials":
        """The catalog's `user` and the first password given: option `password`, the file
        `password_file` (its first line), the environment variable HTAP_SOURCE_PASSWORD."""
        if password is None and password_file:
            try:
                text = Path(password_file).expanduser().read_text()
            except OSError as e:
                raise AccessError(f"catalog option password_file: cannot read {password_file}: {e.strerror}") from e
            password = text.splitlines()[0] if text else ""
        if password is None:
            password = os.environ.get(PASSWORD_ENV)
        return cls(user or None, password)


def reader_role(cfg: HtapConfig, source: SourceConfig, creds: Credentials, now=time.monotonic) -> str | None:
    """The source role whose privileges this read must respect; None (the service's rights)
    only in "declared" mode without a `user`. AccessError when "login" mode refuses the read."""
    if not cfg.access.login_required:
        return creds.user
    if not creds.user or creds.password is None:
        missing = "user and password" if not creds.user else "password"
        raise AccessError(
            f"source {source.name} requires every read to log in as a source role (access.mode = \"login\" in "
            f"{cfg.path}), and this read has no {missing}: set spark.sql.catalog.<catalog>.user and "
            f".password (or .password_file, a file holding it; or {PASSWORD_ENV} in the driver's environment)"
        )
    key = (source.name, creds.user, hashlib.sha256(creds.password.encode()).hexdigest())
    with _LOGINS_LOCK:
        hit = _LOGINS.get(key)
        if hit is not None and hit[1] > now():
            return hit[0]
    role = open_queryable(source).check_login(creds.user, creds.password)
    with _LOGINS_LOCK:
        _LOGINS[key] = (role, now() + cfg.access.login_cache_s)
    return role
