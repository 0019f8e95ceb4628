"""The fleet's shared settings (docs/config.md): tenants and their limits, model prices, the models' rate limits
and the webhook allowlist, held in the store (`store/config.py`) so that every process of a fleet reads the same
ones. `agentq config set NAME FILE` and `PUT /v1/config/{name}` change them (each change a new version), every
process sees a change within a heartbeat, and an environment variable only seeds a name the fleet has not set.

A value is checked by the parser its environment variable uses; a refused one writes nothing. While the store
cannot be read, a process keeps the values it read last (its own environment's before the first read).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentq.errors import ConfigValueError, Problem, StoreUnavailableError
from agentq.llm.prices import PriceTable, parse_prices, price_table, read_price_file
from agentq.protocol.limits import ModelLimits, limits_problems, parse_limits
from agentq.protocol.tenants import TenantLimits, parse_tenants, tenants_problems
from agentq.settings import Settings
from agentq.store.config import ConfigStore
from agentq.webhooks.targets import Allowlist, allowlist_problems

log = logging.getLogger("agentq.config")


@dataclass(frozen=True)
class Setting:
    """One shared setting: its environment variable, its checks, and what a process uses of it."""

    variable: str
    problems: Callable[[Any], list[Problem]]
    parse: Callable[[Any], Any]  # the value a process uses, from a valid JSON value (None: unset)
    what: str  # who reads it, for `agentq config` and docs/config.md


def _escape(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _tenants_problems(value: Any) -> list[Problem]:
    """`tenants_problems`, each problem at its tenant's (or limit's) pointer."""
    if not isinstance(value, dict):
        return [Problem("", p) for p in tenants_problems(value)]
    problems = []
    for tenant, entry in value.items():
        if not isinstance(entry, dict) or not entry:
            problems += [Problem(f"/{_escape(tenant)}", p.removeprefix(f"{tenant}: "))
                         for p in tenants_problems({tenant: entry})]
            continue
        for key, limit in entry.items():
            problems += [Problem(f"/{_escape(tenant)}/{_escape(key)}", p.removeprefix(f"{tenant}: "))
                         for p in tenants_problems({tenant: {key: limit}})]
    return problems


def _prices_problems(value: Any) -> list[Problem]:
    problems = []
    for line in parse_prices(value)[1]:
        pointer, _, message = line.partition(": ")
        problems.append(Problem("" if pointer == "/" else pointer, message))
    return problems


SETTINGS: dict[str, Setting] = {
    "tenants": Setting("AGENTQ_TENANTS", _tenants_problems, lambda v: parse_tenants(v or {}),
                       "submitters (admission), dispatchers and workers (calls' admission, metrics' tenant labels)"),
    "llm_prices": Setting("AGENTQ_LLM_PRICES", _prices_problems, price_table,
                          "submitters (a tool's x-model), dispatchers and workers (costs, budgets)"),
    "llm_limits": Setting("AGENTQ_LLM_LIMITS", limits_problems, lambda v: parse_limits(v or {}),
                          "dispatchers and workers (every model request)"),
    "webhook_allowlist": Setting("AGENTQ_WEBHOOK_ALLOWLIST", allowlist_problems, lambda v: Allowlist.parse(v or []),
                                 "submitters (options.webhook), dispatchers and workers (deliveries)"),
}
NAMES = tuple(sorted(SETTINGS))


def unknown_name(name: str) -> str | None:
    """Why `name` names no shared setting (the names listed), or None."""
    return None if name in SETTINGS else f"no config named {name!r}: the fleet's config names are {', '.join(NAMES)}"


def seeds(settings: Settings) -> dict[str, Any]:
    """This process's environment values of the shared settings (a broken price file is a `ConfigurationError`)."""
    found: dict[str, Any] = {}
    if settings.tenants is not None:
        found["tenants"] = settings.tenants
    if settings.llm_prices is not None:
        found["llm_prices"] = read_price_file(settings.llm_prices)
    if settings.llm_limits is not None:
        found["llm_limits"] = settings.llm_limits
    if settings.webhook_allowlist:
        found["webhook_allowlist"] = list(settings.webhook_allowlist)
    return found


class FleetConfig:
    """The shared settings as this process uses them (read through `store`, or the environment alone without
    one), parsed once per version."""

    def __init__(self, store: ConfigStore | None, environment: dict[str, Any]):
        self.store = store
        self._last: dict[str, dict] = {name: {"version": 0, "value": value, "source": SETTINGS[name].variable}
                                       for name, value in environment.items()}
        self._retry_at = 0.0  # after a failed read: when to read again
        self._parsed: dict[str, tuple[Any, Any]] = {}  # name -> ((version, set_at) of its entry, parsed value)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings, store: ConfigStore | None) -> FleetConfig:
        return cls(store, seeds(settings))

    def load(self) -> None:
        """Read the fleet's settings now, seeding the unset ones from this process's environment (a worker's or a
        dispatcher's start: the first process started with a variable writes it)."""
        self._entries()

    def tenant_limits(self) -> dict[str, TenantLimits]:
        return self.current("tenants")  # type: ignore[no-any-return]

    def prices(self) -> PriceTable:
        return self.current("llm_prices")  # type: ignore[no-any-return]

    def model_limits(self) -> dict[str, ModelLimits]:
        return self.current("llm_limits")  # type: ignore[no-any-return]

    def allowlist(self) -> Allowlist:
        return self.current("webhook_allowlist")  # type: ignore[no-any-return]

    def current(self, name: str) -> Any:
        """The parsed value of `name` as read within the last heartbeat."""
        entry = self._entries().get(name)
        key = (entry.get("version"), entry.get("set_at")) if entry is not None else None
        with self._lock:
            parsed = self._parsed.get(name)
        if parsed is not None and parsed[0] == key:
            return parsed[1]
        value = self._parse(name, entry)
        with self._lock:
            self._parsed[name] = (key, value)
        return value

    def _parse(self, name: str, entry: dict | None) -> Any:
        setting = SETTINGS[name]
        if entry is None:
            return setting.parse(None)
        problems = setting.problems(entry.get("value"))
        if problems:  # written by something other than `set`: the defaults rather than a broken value
            log.error("config %s (version %s) is not valid, its defaults are used: %s", name, entry.get("version"),
                      "; ".join(str(p) for p in problems))
            return setting.parse(None)
        return setting.parse(entry["value"])

    def _entries(self) -> dict[str, dict]:
        if self.store is None:
            return self._last
        now = time.monotonic()
        if now < self._retry_at:
            return self._last
        try:
            entries = self.store.entries()
        except StoreUnavailableError:  # kept through an outage, tried again a heartbeat later (not on every use)
            self._retry_at = now + self.store.ttl_s
            return self._last
        self._last = entries
        return entries

    # -------------------------------------------------------------------- `agentq config`, `/v1/config`

    def show(self, name: str | None = None) -> dict[str, dict]:
        """Every shared setting (or `name`'s) as the store holds it now: version (0: never set), value (None:
        unset, the defaults apply), when and by what it was set, its variable and who reads it."""
        if name is not None and (problem := unknown_name(name)) is not None:
            raise ConfigValueError(problem)
        if self.store is None:
            entries = self._last
        else:
            self.store.seed()  # a process started with the variables seeds the unset names first
            entries = self.store.read()
        return {n: _shown(n, entries.get(n)) for n in ([name] if name is not None else NAMES)}

    def set(self, name: str, value: Any) -> dict:
        """Check `value` as `name` and write it as its next version; returns it as `show` does. Raises
        `ConfigValueError` naming every problem (or the known names), and writes nothing then."""
        if (problem := unknown_name(name)) is not None:
            raise ConfigValueError(problem)
        problems = SETTINGS[name].problems(value)
        if problems:
            raise ConfigValueError(f"config {name} refused, nothing was written", problems)
        if self.store is None:
            raise ConfigValueError(f"config {name}: this process has no store to write it to")
        self.store.set(name, value)
        return self.show(name)[name]


def _shown(name: str, entry: dict | None) -> dict:
    setting = SETTINGS[name]
    entry = entry or {"version": 0, "value": None, "set_at": None, "source": None}
    return {"version": entry.get("version", 0), "value": entry.get("value"), "set_at": entry.get("set_at"),
            "source": entry.get("source"), "variable": setting.variable, "read_by": setting.what}
