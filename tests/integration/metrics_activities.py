"""Activities for the metrics tests, served by separate `agentq worker` processes (imported with `-m` beside
`procs_activities`): one that succeeds (optionally after a sleep), one that fails its first attempt per tag and
then succeeds, one that always fails. Their tool schemas are the JSON files in `TOOLS_DIR`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentq.protocol.activities import Activity

TOOLS_DIR = Path(__file__).resolve().parent / "metrics_tools"

_redis = None


def _first_attempt(tag: str) -> bool:
    """True the first time a tag is seen, in any process (counted in the worker's Redis)."""
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(os.environ["AGENTQ_REDIS_URL"], decode_responses=True)
    return int(_redis.incr(f"metrics:flaky:{tag}")) == 1


def met_ok(call: dict) -> dict:
    time.sleep(float(call.get("sleep", 0)))
    return {"pid": os.getpid()}


def met_flaky(call: dict) -> dict:
    if _first_attempt(str(call["tag"])):
        raise ConnectionError("the first attempt fails")
    return {"pid": os.getpid()}


def met_bad(call: dict) -> dict:
    raise ValueError("this activity always fails")


Activity.register("metOk", met_ok)
Activity.register("metFlaky", met_flaky, retries=2, retry_backoff=0.05)
Activity.register("metBad", met_bad)
