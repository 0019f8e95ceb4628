"""Schedules in Redis (docs/schedules.md): `ScheduleStore`.

Four keys under the `{schedules}` hash tag (one node of a Redis Cluster, so a transaction may touch them all):
`defs` (hash: name -> the schedule's JSON), `state` (hash: name -> its firing state's JSON: the next slot not yet
handled, the last slot fired and its job, a buffered slot, counts), `due` (zset: name -> when the firing loop looks
at it next, ms) and `lease` (string: the dispatcher that fires schedules, `SET NX PX`, renewed). A change from the
API writes definition, state and due time in one transaction; the firing loop moves a schedule's state by
compare-and-set on the state it read, so a change made meanwhile (or a second loop that lost its lease) wins over
a stale advance.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.protocol.digests import dumps
from agentq.store.boundary import map_store_errors
from agentq.store.keys import FleetKeys
from agentq.store.script_runner import ScriptRunner


@map_store_errors
class ScheduleStore:
    """The schedule keys over the store's Redis connection; each step is one command, transaction or script."""

    def __init__(self, redis: Any, fleet: FleetKeys):
        self.redis = redis
        self.defs, self.state, self.due = fleet.schedules("defs"), fleet.schedules("state"), fleet.schedules("due")
        self.lease_key = fleet.schedules("lease")
        self._scripts = ScriptRunner(redis, ("schedule_advance", "schedule_lease", "schedule_release"))

    def read(self, name: str) -> tuple[dict, str] | None:
        """A schedule's definition and its state's raw JSON ("" when it has none), or None."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.defs, name)
        pipe.hget(self.state, name)
        definition, state = pipe.execute()
        return None if definition is None else (json.loads(definition), _text(state))

    def read_all(self) -> dict[str, tuple[dict, str]]:
        """Every schedule: name -> (definition, state's raw JSON)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.defs)
        pipe.hgetall(self.state)
        definitions, states = pipe.execute()
        states = {_text(k): _text(v) for k, v in states.items()}
        return {_text(k): (json.loads(v), states.get(_text(k), "")) for k, v in definitions.items()}

    def write(self, definition: dict, state: dict, due_ms: int | None) -> None:
        """Definition, state and due time of one schedule, in one transaction (a change from the API)."""
        name = definition["name"]
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.defs, name, dumps(definition))
        pipe.hset(self.state, name, dumps(state))
        if due_ms is None:
            pipe.zrem(self.due, name)
        else:
            pipe.zadd(self.due, {name: due_ms})
        pipe.execute()

    def delete(self, name: str) -> bool:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.defs, name)
        pipe.hdel(self.state, name)
        pipe.zrem(self.due, name)
        return bool(pipe.execute()[0])

    def advance(self, name: str, read: str, state: dict, due_ms: int | None) -> bool:
        """Move a schedule's state on from `read` (what the caller read); False, and nothing written, when it
        changed meanwhile."""
        return bool(self._scripts.run("schedule_advance", [self.state, self.due],
                                      [name, read, dumps(state), "" if due_ms is None else due_ms]))

    def has_schedules(self) -> bool:
        """Whether any schedule exists."""
        return bool(self.redis.exists(self.defs))

    def due_names(self, now_ms: int, limit: int = 100) -> list[str]:
        return [_text(n) for n in self.redis.zrangebyscore(self.due, "-inf", now_ms, start=0, num=limit)]

    def next_due_ms(self) -> int | None:
        first = self.redis.zrange(self.due, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def due_of(self) -> dict[str, int]:
        return {_text(n): int(s) for n, s in self.redis.zrange(self.due, 0, -1, withscores=True)}

    def add_missing_due(self, due: dict[str, int]) -> None:
        """Due times for schedules that have none (`ZADD NX`: one set meanwhile stays)."""
        if due:
            self.redis.zadd(self.due, due, nx=True)

    def take_lease(self, token: str, ttl_ms: int) -> bool:
        """Take the firing lease for `ttl_ms`, or renew it when `token` holds it."""
        return bool(self._scripts.run("schedule_lease", [self.lease_key], [token, ttl_ms]))

    def release_lease(self, token: str) -> None:
        self._scripts.run("schedule_release", [self.lease_key], [token])


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["ScheduleStore"]
