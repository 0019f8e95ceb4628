"""Versions of activities for the rollout tests (docs/rollouts.md), served by separate `agentq worker` processes.

`agentq worker -m tests.integration.rollout_activities` with `ROLLOUT_VERSIONS` (comma-separated, default "1")
registers those versions of `sendEmail` and `flaky`, and their tools. Every run is recorded in the worker's
Redis (`AGENTQ_REDIS_URL`): `rollout:runs:<activity>:<version>` (INCR) and, for `flaky`,
`rollout:flaky:<tag>` (RPUSH of the version that ran each attempt).
"""

from __future__ import annotations

import os
import time
from typing import Any

from agentq.protocol.activities import Activity
from agentq.protocol.tools import Tool

_redis: Any = None

SEND_EMAIL = {"type": "object", "description": "send an e-mail (rollout test tool)", "properties": {
    "_tool": {"type": "string", "const": "sendEmail"}, "to": {"type": "string"}, "_output": {"type": "object"}},
    "required": ["to"]}
FLAKY = {"type": "object", "description": "fails its first attempt (rollout test tool)", "properties": {
    "_tool": {"type": "string", "const": "flaky"}, "tag": {"type": "string"}, "_output": {"type": "object"}},
    "required": ["tag"]}
V2_SECONDS = 0.03  # version 2 takes this long: the report's durations tell the routes apart


def _client() -> Any:
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(os.environ["AGENTQ_REDIS_URL"], decode_responses=True)
    return _redis


def send_email(version: str):
    def handler(call: dict) -> dict:
        if version == "2":
            time.sleep(V2_SECONDS)
        _client().incr(f"rollout:runs:sendEmail:{version}")
        if call["to"].startswith("fail"):
            raise RuntimeError(f"mailbox {call['to']} refused")
        return {"version": version, "pid": os.getpid(), "to": call["to"]}

    return handler


def flaky(version: str):
    def handler(call: dict) -> dict:
        attempts = _client().rpush(f"rollout:flaky:{call['tag']}", version)
        if attempts == 1:
            raise RuntimeError("first attempt fails")
        return {"version": version, "attempts": attempts}

    return handler


Tool.register("sendEmail", SEND_EMAIL, replace=True)
Tool.register("flaky", FLAKY, replace=True)
for _version in (os.environ.get("ROLLOUT_VERSIONS") or "1").split(","):
    Activity.register("sendEmail", send_email(_version), version=_version, replace=True)
    Activity.register("flaky", flaky(_version), version=_version, retries=2, retry_backoff=0.05, replace=True)
