"""Activities for the operations tests (Flower, warm shutdown, sensitive parameters), served by separate
`agentq worker -m tests.integration.ops_activities` processes; their tools are the JSON files in `TOOLS_DIR`.

Each handler leaves a trace in the private Redis the worker uses (`AGENTQ_REDIS_URL`), so a test can await what
happened instead of sleeping:

- `opsCharge` (`x-sensitive: ["/card/number"]`) pushes the card number it received onto `ops:received:<tag>`
  (the activity gets the real value) and fails with a message quoting it when the number ends in 0000 (after
  one retry), so the tests can check the message is masked wherever it is shown;
- `opsGate` pushes its pid onto `ops:started:<tag>` when it starts, then waits (BLPOP) for a token on
  `ops:gate:<tag>` for at most `seconds`, and pushes its pid onto `ops:finished:<tag>` when it returns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentq.protocol.activities import Activity

TOOLS_DIR = Path(__file__).resolve().parent / "ops_tools"

_redis: Any = None


def redis_client() -> Any:
    global _redis
    if _redis is None:
        import redis

        # no socket timeout: the gate's BLPOP may wait longer than redis-py's default of 5 s
        _redis = redis.Redis.from_url(os.environ["AGENTQ_REDIS_URL"], decode_responses=True, socket_timeout=None)
    return _redis


def ops_charge(call: dict) -> dict:
    number = str(call["card"]["number"])
    redis_client().rpush(f"ops:received:{call.get('tag', '')}", number)
    if number.endswith("0000"):
        raise RuntimeError(f"the issuer declined card {number}")
    return {"status": "captured", "last4": number[-4:], "holder": call["card"].get("holder")}


def ops_gate(call: dict) -> dict:
    client, tag = redis_client(), call.get("tag", "")
    client.rpush(f"ops:started:{tag}", os.getpid())
    opened = client.blpop([f"ops:gate:{tag}"], timeout=float(call.get("seconds", 60)))
    client.rpush(f"ops:finished:{tag}", os.getpid())
    return {"pid": os.getpid(), "opened": opened is not None}


Activity.register("opsCharge", ops_charge, retries=1, retry_backoff=0.05)
Activity.register("opsGate", ops_gate)
