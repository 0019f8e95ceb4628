"""Routing lives in the runtime only: task names and queues come from Settings in one place."""

from __future__ import annotations

from agentq.engine.routing import LATENT_TASK, MODULE_TASK, Routing, activity_task
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.records import CallMode, CallRecord
from agentq.settings import Settings


def record(mode: CallMode, activity: str = "") -> CallRecord:
    return CallRecord(id="call_1", index=0, call={"_tool": "t"}, tool="t", activity=activity, mode=mode,
                      awaited=True)


def test_engine_calls_follow_the_configured_engine_queue():
    routing = Routing.from_settings(Settings(engine_queue="llm-bound"))
    assert routing.route(record(CallMode.LATENT), {}).queue == "llm-bound"
    assert routing.route(record(CallMode.LATENT), {}).task == LATENT_TASK
    assert (routing.route(record(CallMode.MODULE), {}).task, routing.route(record(CallMode.MODULE), {}).queue) == (
        MODULE_TASK, "llm-bound")


def test_explicit_calls_go_to_the_announced_queue_or_their_own():
    routing = Routing(engine_queue="agentq.engine")
    own = routing.route(record(CallMode.EXPLICIT, "fetch"), {})
    assert (own.task, own.queue) == ("agentq.activity.fetch", "agentq.activity.fetch")
    declared = routing.route(record(CallMode.EXPLICIT, "fetch"), {"fetch": {"queue": "io"}})
    assert (declared.task, declared.queue) == (activity_task("fetch"), "io")


def test_announcement_names_task_and_queue():
    registry = ActivityRegistry()
    registry.register("a", lambda call: None)
    registry.register("b", lambda call: None, queue="io")
    routing = Routing(engine_queue="agentq.engine")
    assert routing.announcement(registry.get("a"))["queue"] == "agentq.activity.a"
    assert routing.announcement(registry.get("b"))["queue"] == "io"
    assert routing.announcement(registry.get("b"))["task"] == "agentq.activity.b"
