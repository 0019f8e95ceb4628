"""A task forged onto one activity's queue that names another activity's ready call: the worker of that queue
(which does not serve the call's activity) leaves the call as it was, to its own task, instead of failing it with
`ActivityNotServed`. Real Redis, real in-process Celery workers; the forged task's end is awaited on Celery's
`task_postrun` signal, never slept on."""

from __future__ import annotations

import logging

import pytest

from agentq.engine.routing import Routing
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.records import WorkerAnnouncement
from agentq.runtime.worker import InProcessWorker
from agentq.store.fleet import RedisFleet
from agentq.store.keys import JobKeys
from tests.integration.conftest import store_of
from tests.integration.test_hardening import TOOLS, publish, tasks  # noqa: F401 (tasks: a fixture)
from tests.integration.test_job_validation import sender

pytestmark = pytest.mark.timeout(90)


def worker_of(harness, registry: ActivityRegistry) -> InProcessWorker:
    """A worker serving only the activities of `registry` (and the engine queue), polling every 0.1 s."""
    runtime = harness.runtime(activities=registry)
    runtime.app.conf.broker_transport_options = {**(runtime.app.conf.broker_transport_options or {}),
                                                 "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=True, engine=True, concurrency=2).start()
    harness._workers.append(worker)
    return worker


@pytest.mark.parametrize("carried", ["forged record", "stored record", "no record"])
def test_a_task_forged_onto_another_activitys_queue_leaves_the_call_to_its_own(harness, tasks, caplog,  # noqa: F811
                                                                                carried):
    """`forged record`: the task carries a record naming the queue's activity (the claim finds the stored one is
    another's, and gives the call back); `stored record`: it carries the call's own record (nothing is claimed);
    `no record`: only the pointer."""
    caplog.set_level(logging.WARNING)
    ran: dict[str, list] = {"good": [], "evil": []}
    for name in ("good", "evil"):
        harness.tools.register(name, TOOLS[name])
    good, evil = ActivityRegistry(), ActivityRegistry()
    good.register("good", lambda call: ran["good"].append(call) or "stored call")
    evil.register("evil", lambda call: ran["evil"].append(call) or "forged call")
    for registry in (good, evil):
        for spec in registry.specs():
            harness.activities.register(spec.name, spec.handler)
    client = harness.client()
    publish(client)
    store = store_of(client)
    routing = Routing.from_settings(harness.settings)
    RedisFleet(store).announce_worker("earlier-worker", WorkerAnnouncement("earlier-worker", activities=tuple(
        routing.announcement(spec) for spec in harness.activities.specs())), ttl_s=60)
    handle = client.submit({"calls": [{"_tool": "good", "_outputPath": "†state.ok"}]})
    (call_id, stored), = store.call_records(handle.id).items()
    keys = JobKeys(client.settings.namespace, handle.id)
    real_task = store.redis.lpop(stored.queue)  # the call's own task, put back on its queue later
    assert real_task is not None and store.redis.llen(stored.queue) == 0

    forged = {**stored.to_dict(), "activity": "evil", "tool": "evil", "task": "agentq.activity.evil",
              "queue": "agentq.activity.evil", "call": {**stored.call, "_tool": "evil", "_outputPath": "†state.x"}}
    args = {"forged record": [handle.id, call_id, forged], "stored record": [handle.id, call_id, stored.to_task()],
            "no record": [handle.id, call_id]}[carried]
    sender(harness).send_task("agentq.activity.evil", args=args, queue="agentq.activity.evil", task_id="forged")
    worker_of(harness, evil)
    assert tasks.wait("forged") == {"forged": "elsewhere"}

    # the call is as it was: ready, no attempt counted, no event about it, nothing run
    assert store.call_statuses(handle.id)[call_id].value == "ready"
    assert int(store.redis.hget(keys.attempts, call_id) or 0) == 0
    assert not store.redis.exists(keys.lease(call_id))
    assert [e["event"] for _, e in store.read_events(handle.id) if e.get("call_id") == call_id] == []
    assert ran == {"good": [], "evil": []}
    assert any("left to its own task" in r.getMessage() for r in caplog.records)

    # its own task, on its own queue, runs it on its own worker
    store.redis.rpush(stored.queue, real_task)
    worker_of(harness, good)
    record = handle.result(timeout=20)
    assert record["status"] == "succeeded" and record["state"] == {"ok": "stored call"}
    assert len(ran["good"]) == 1 and ran["evil"] == []
    assert [c["attempts"] for c in handle.calls()] == [1]
