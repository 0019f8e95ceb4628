"""What the worker processes of benchmarks/recovery.py run.

`agentq worker -m benchmarks.recovery_workers` serves the activity `recoverySleep`; `celery -A
benchmarks.recovery_workers:bare worker -Q bench.recovery` serves the bare Celery task `bench.sleep`, on an app
built by agentq's own `create_app` from the same `AGENTQ_*` settings (JSON, acks late, reject on worker lost,
prefetch, visibility timeout, unacked-restore sweep). Both record each start of a run as `<pid> <unix time>`
in the Redis list `recovery:starts:<tag>` (`AGENTQ_REDIS_URL`), and its end in `recovery:ends:<tag>`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from agentq.protocol.activities import Activity
from agentq.protocol.tools import Tool
from agentq.runtime.app import create_app
from agentq.settings import Settings

BARE_QUEUE = "bench.recovery"
BARE_TASK = "bench.sleep"

_redis: Any = None


def _client() -> Any:
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(os.environ["AGENTQ_REDIS_URL"], decode_responses=True)
    return _redis


def sleep_and_record(tag: str, seconds: float) -> dict:
    _client().rpush(f"recovery:starts:{tag}", f"{os.getpid()} {time.time():.3f}")
    time.sleep(seconds)
    _client().rpush(f"recovery:ends:{tag}", f"{os.getpid()} {time.time():.3f}")
    return {"pid": os.getpid()}


Tool.register("recoverySleep", {
    "type": "object", "description": "Sleeps `seconds`, recording when it started and ended (recovery benchmark).",
    "properties": {"_tool": {"type": "string", "const": "recoverySleep"},
                   "_outputPath": {"type": "string", "pattern": "^†"},
                   "seconds": {"type": "number"}, "tag": {"type": "string"}, "_output": {}},
    "required": ["_tool", "seconds", "tag"]})
Activity.register("recoverySleep", lambda call: sleep_and_record(call["tag"], float(call["seconds"])))

bare = create_app(Settings(), name="bench-recovery")


@bare.task(name=BARE_TASK, shared=False)
def bare_sleep(tag: str, seconds: float) -> None:
    sleep_and_record(tag, seconds)
