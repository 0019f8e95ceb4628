"""Rollout rules and their figures in Redis (docs/rollouts.md): `RolloutStore`.

The rules are one hash (tool -> rule JSON, `FleetKeys.rollout_rules`), read when calls are routed and reused for
`ttl_s` (a heartbeat, as a submitter reuses what the fleet announced: no round trip per submission); the figures
one hash of counters (`FleetKeys.rollout_stats`, see `protocol/rollout_report.py`), added to by one pipeline per
ended call of a tool with a rule. Both keys share the `{rollouts}` hash tag, so on a Redis Cluster the report reads
them from one node. Single commands and pipelines only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agentq.protocol.digests import dumps
from agentq.protocol.rollout_report import bucket_of, field, report
from agentq.protocol.rollouts import Rule
from agentq.store.boundary import map_store_errors
from agentq.store.keys import FleetKeys


@map_store_errors
class RolloutStore:
    """The rollout keys over the store's Redis connection; thread-safe (each step is one command or pipeline)."""

    def __init__(self, redis: Any, fleet: FleetKeys, *, ttl_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        self.redis = redis
        self.fleet = fleet
        self.ttl_s = ttl_s
        self._clock = clock
        self._read: tuple[float, dict[str, Rule]] | None = None  # when the rules were read, and what they were
        self._lock = threading.Lock()

    def rules(self) -> dict[str, Rule]:
        """Every tool's rule, as read within the last `ttl_s` (this process's own changes are seen at once)."""
        now = self._clock()
        with self._lock:
            read = self._read
        if read is not None and 0 <= now - read[0] < self.ttl_s:
            return read[1]
        rules = {tool: Rule.from_dict(tool, rule) for tool, rule in self.rule_dicts().items()}
        with self._lock:
            self._read = (now, rules)
        return rules

    def rule_dicts(self) -> dict[str, dict]:
        """Every tool's rule in its JSON form."""
        return {str(tool): json.loads(value) for tool, value in self.redis.hgetall(self.fleet.rollout_rules).items()}

    def set_rule(self, rule: Rule) -> None:
        self.redis.hset(self.fleet.rollout_rules, rule.tool, dumps(rule.to_dict()))
        self._forget()

    def clear_rule(self, tool: str) -> bool:
        """Remove a tool's rule (its figures stay in the report); True when it had one."""
        cleared = bool(self.redis.hdel(self.fleet.rollout_rules, tool))
        self._forget()
        return cleared

    def _forget(self) -> None:
        with self._lock:
            self._read = None

    def call_ended(self, tool: str, route: str, status: str, seconds: float, cost_nanousd: int | None) -> None:
        """Count an attempt of a routed call that ended: `done` or `failed` (a call), or `retry`."""
        key, pipe = self.fleet.rollout_stats, self.redis.pipeline(transaction=False)
        if status == "retry":
            pipe.hincrby(key, field(tool, route, "retries"), 1)
        else:
            pipe.hincrby(key, field(tool, route, "calls"), 1)
            pipe.hincrby(key, field(tool, route, "done" if status == "done" else "failed"), 1)
            pipe.hincrby(key, field(tool, route, f"b{bucket_of(seconds)}"), 1)
        if cost_nanousd is None:
            pipe.hincrby(key, field(tool, route, "unpriced"), 1)
        elif cost_nanousd:
            pipe.hincrby(key, field(tool, route, "cost"), cost_nanousd)
        pipe.execute()

    def report(self) -> dict[str, Any]:
        """Per tool and route: calls, success rate, p50/p95 duration, cost (`rollout_report.report`)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.fleet.rollout_stats)
        pipe.hgetall(self.fleet.rollout_rules)
        stats, rules = pipe.execute()
        return report(_text(stats), {str(k): json.loads(v) for k, v in rules.items()})

    def reset(self, tool: str) -> int:
        """Drop a tool's figures; returns how many counters were dropped."""
        fields = [k for k in _text(self.redis.hgetall(self.fleet.rollout_stats)) if k.startswith(f"{tool}|")]
        return int(self.redis.hdel(self.fleet.rollout_stats, *fields)) if fields else 0


def _text(mapping: Mapping[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
            for k, v in mapping.items()}
