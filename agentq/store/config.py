"""The fleet's shared settings in Redis (`agentq config`, docs/config.md): `ConfigStore`.

One hash (`FleetKeys.config`): a setting's name -> `{"version": N, "value": <JSON>, "set_at": <ISO>, "source":
"set" | "AGENTQ_<NAME>"}`. Each write bumps the version in one script step; a seed (a process started with the
setting's environment variable) is written only while the name is unset, so the environment never overrides what
the fleet holds. Every process reads the whole hash once per heartbeat (`ttl_s`) and reuses it meanwhile, as a
submitter reuses what the fleet announced; its own writes are seen at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agentq.protocol.digests import dumps, now_iso
from agentq.store.boundary import map_store_errors
from agentq.store.keys import FleetKeys
from agentq.store.script_runner import ScriptRunner

log = logging.getLogger("agentq.config")


@map_store_errors
class ConfigStore:
    """The config hash over the store's Redis connection; thread-safe. `seeds` are this process's environment
    values (name -> value), written on the first read to the names the fleet has not set."""

    def __init__(self, redis: Any, fleet: FleetKeys, *, ttl_s: float = 0.0, seeds: Mapping[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.redis = redis
        self.fleet = fleet
        self.ttl_s = ttl_s
        self.seeds = dict(seeds or {})
        self._clock = clock
        self._scripts = ScriptRunner(redis, ["config_set"])  # lua/config_set.lua
        self._read: tuple[float, dict[str, dict]] | None = None
        self._seeded = False
        self._lock = threading.Lock()

    def entries(self) -> dict[str, dict]:
        """Every set name's entry, as read within the last `ttl_s` (the first read seeds the unset names)."""
        now = self._clock()
        with self._lock:
            read = self._read
        if read is not None and 0 <= now - read[0] < self.ttl_s:
            return read[1]
        self.seed()
        return self.read(now)

    def read(self, now: float | None = None) -> dict[str, dict]:
        """Every set name's entry, read now."""
        entries = {_text(name): json.loads(value) for name, value in self.redis.hgetall(self.fleet.config).items()}
        with self._lock:
            self._read = (self._clock() if now is None else now, entries)
        return entries

    def set(self, name: str, value: Any, *, source: str = "set") -> int:
        """Write `value` as `name`'s new version (checked by the caller); returns that version."""
        version = int(self._scripts.run("config_set", [self.fleet.config], [name, _entry(value, source), "0"]))
        self._forget()
        return version

    def seed(self) -> None:
        """Write each seed to its name unless the fleet set it already (then a different value is warned of); once
        per process."""
        if self._seeded:
            return
        for name, value in self.seeds.items():
            variable = f"AGENTQ_{name.upper()}"
            if int(self._scripts.run("config_set", [self.fleet.config], [name, _entry(value, variable), "1"])):
                log.info("config %s seeded from %s", name, variable)
                continue
            held = self.redis.hget(self.fleet.config, name)
            if held is not None and json.loads(held).get("value") != value:
                log.warning("%s is set here but the fleet's config %s differs: the fleet's is used (see `agentq "
                            "config %s`, change it with `agentq config set %s FILE`)", variable, name, name, name)
        self._seeded = True  # not before: a store that could not be reached is seeded on a later read
        self._forget()

    def _forget(self) -> None:
        with self._lock:
            self._read = None


def _entry(value: Any, source: str) -> str:
    return dumps({"value": value, "set_at": now_iso(), "source": source})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
