"""The `[access]` section: who may read HTAP tables through Spark.

`mode = "declared"` (the default) keeps the catalog's `user` option self-declared: a read with
it is checked against that source role's privileges, a read without it has the service's rights.
`mode = "login"` is for shared clusters: every read must authenticate as a source role (the
catalog's `user` and a password, checked by logging in to the source), and that role's
privileges are then checked as in "declared" mode; a read without credentials is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from htap.errors import ConfigError

MODE_DECLARED = "declared"
MODE_LOGIN = "login"
MODES = (MODE_DECLARED, MODE_LOGIN)

# key -> (default, description).
ACCESS_KEYS: dict[str, tuple[object, str]] = {
    "mode": (
        MODE_DECLARED,
        'who reads HTAP tables: "declared" (the catalog\'s `user` option, if set, is trusted as given) or "login" '
        "(every read logs in to the source as the catalog's `user` with its `password`; none: refused)",
    ),
    "login_cache_s": (60.0, "login mode: seconds a successful login of a role and password is remembered"),
}


@dataclass(frozen=True)
class AccessConfig:
    mode: str = MODE_DECLARED
    login_cache_s: float = 60.0

    @property
    def login_required(self) -> bool:
        return self.mode == MODE_LOGIN


def parse_access(raw: object, path: Path) -> AccessConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [access] must be a table")
    for key in raw:
        if key not in ACCESS_KEYS:
            raise ConfigError(f"{path}: unknown config key 'access.{key}'; known keys: {', '.join(ACCESS_KEYS)}")
    mode = raw.get("mode", MODE_DECLARED)
    if mode not in MODES:
        raise ConfigError(f"{path}: access.mode must be one of {', '.join(repr(m) for m in MODES)}, got {mode!r}")
    cache = raw.get("login_cache_s", ACCESS_KEYS["login_cache_s"][0])
    if isinstance(cache, bool) or not isinstance(cache, (int, float)) or cache < 0:
        raise ConfigError(f"{path}: access.login_cache_s must be a number of seconds >= 0, got {cache!r}")
    return AccessConfig(mode=mode, login_cache_s=float(cache))
