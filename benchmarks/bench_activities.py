"""The activities and tools of `benchmarks/throughput.py`'s agentq worker processes.

`agentq worker -m bench_activities` (with `benchmarks/` on `PYTHONPATH`) imports this module, which registers
on the default registries two no-op activities and their tools: `noop` returns its index, `inc` adds one.
"""

from __future__ import annotations

from typing import Any

from agentq.protocol.activities import Activity
from agentq.protocol.tools import Tool

NOOP_TOOL: dict[str, Any] = {
    "type": "object", "description": "does nothing and returns its index",
    "properties": {"_tool": {"type": "string", "const": "noop"}, "i": {"type": "integer"}, "_output": {}},
}
INC_TOOL = {
    "type": "object", "description": "adds one",
    "properties": {"_tool": {"type": "string", "const": "inc"}, "x": {"type": "integer"}, "_output": {}},
}
# A tool whose activity is known but served by no live worker: its calls wait on their queue
# (docs/protocol.md#activities). The benchmark submits jobs of it to time submission alone (nothing runs them).
PARK_TOOL = {
    "type": "object", "description": "never runs: measures submission",
    "properties": {"_tool": {"type": "string", "const": "park"}, "x": {}, "_output": {}},
}

# the same no-op, registered idempotent: its calls run before their claim and settle in one store step
NOOP_IDEMPOTENT_TOOL = {**NOOP_TOOL, "properties": {**NOOP_TOOL["properties"],
                                                    "_tool": {"type": "string", "const": "noop_i"}}}

if "noop" not in Tool:
    Tool.register("noop", NOOP_TOOL)
    Tool.register("noop_i", NOOP_IDEMPOTENT_TOOL)
    Tool.register("inc", INC_TOOL)
    Activity.register("noop", lambda call: call["i"])
    Activity.register("noop_i", lambda call: call["i"], idempotent=True)
    Activity.register("inc", lambda call: call["x"] + 1)


def _profile_children(directory: str) -> None:
    """`BENCH_CPROFILE=<dir>`: each pool child profiles its own CPU time (cProfile with `time.process_time`,
    so waiting on Redis or the broker costs nothing) from its start until it exits, into `<dir>/<pid>.prof`."""
    import cProfile
    import os
    import time

    from celery.signals import worker_process_init, worker_process_shutdown

    profiles: dict[int, cProfile.Profile] = {}

    @worker_process_init.connect(weak=False)
    def start(**_: object) -> None:
        profiles[os.getpid()] = profile = cProfile.Profile(time.process_time)
        profile.enable()

    @worker_process_shutdown.connect(weak=False)
    def stop(**_: object) -> None:
        profile = profiles.pop(os.getpid(), None)
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(directory, f"{os.getpid()}.prof"))


def _install() -> None:
    import os

    if os.environ.get("BENCH_CPROFILE"):
        _profile_children(os.environ["BENCH_CPROFILE"])


_install()
