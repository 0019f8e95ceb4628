"""Loading the store's Lua steps and running one by EVALSHA (`ScriptRunner`, the base of `store/scripts.py`).

Loading: each script gets two preambles in front, the statuses (`agentq.protocol.status.lua_preamble`) and the
numbers it shares with Python (`step_constants.lua_constants`: `HEADROOM_MS`, ...), and each line
`--#include <fragment>` is replaced by `lua/<fragment>.lua` (functions several scripts share; a fragment may
include another). Every script of the store, the webhooks' included, is loaded here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from agentq.protocol.status import lua_preamble
from agentq.store.step_constants import lua_constants

_INCLUDE = "--#include "


def lua_source(name: str) -> str:
    """The runnable source of the step `lua/<name>.lua`: the statuses' and the constants' preambles, then the
    script with its `--#include` lines expanded."""
    return lua_preamble() + lua_constants() + _expanded(name)


def _expanded(name: str) -> str:
    """`lua/<name>.lua` with each `--#include` line replaced by its fragment, expanded likewise (a fragment may
    include another: `_committed` ends a job as `finalize` does, with `_ended`)."""
    return "".join(_expanded(line.removeprefix(_INCLUDE).strip()) if line.startswith(_INCLUDE) else line
                   for line in _lua_file(name).splitlines(keepends=True))


def _lua_file(name: str) -> str:
    return resources.files("agentq.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


class ScriptRunner:
    """The Lua steps `names` registered on one Redis client (a script is loaded on first use, again after a flush)."""

    def __init__(self, redis: Any, names: Iterable[str]):
        self._redis = redis
        self._scripts = {name: redis.register_script(lua_source(name)) for name in names}

    @property
    def registered(self) -> dict[str, Any]:
        """Step name -> its registered redis-py `Script` (`sha`, `script`): what tells EVALSHA commands apart."""
        return dict(self._scripts)

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA the step, as redis-py's `Script` does but without its layers: a Redis that lost its scripts (a
        restart, SCRIPT FLUSH) is sent the script, then the step again."""
        from redis.exceptions import NoScriptError

        script = self._scripts[name]
        try:
            return self._redis.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            script.sha = self._redis.script_load(script.script)
            return self._redis.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the step `name` for a companion that lays out its own steps (`limits.py`, `tenants.py`)."""
        return self._run(name, keys, args)
