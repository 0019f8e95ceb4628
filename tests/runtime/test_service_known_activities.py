"""Unit tests of `JobService` composing against *known* activities (docs/protocol.md#activities), on `StateStore`:
an activity whose workers are all gone keeps its tools explicit and its calls routed to its announced queue,
until it is forgotten or its memory runs out. No Celery (the integration test drives real workers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.engine.routing import LATENT_TASK, activity_task
from agentq.protocol.records import CallMode, WorkerAnnouncement
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.runtime.clock import ManualClock
from tests.runtime.conftest import Rig, tool_schema

pytestmark = pytest.mark.timeout(10)

PAY = {"name": "pay", "task": "agentq.activity.pay", "queue": "payments", "retries": 3}
JOB = {"calls": [{"_tool": "pay", "amount": 5, "_outputPath": "†state.payment"}]}


@pytest.fixture
def rig(clock: ManualClock, redis_store: StateStore) -> Iterator[Rig]:
    rig = Rig(redis_store, Settings(activity_memory_s=3600))
    rig.tools.register("pay", tool_schema("pay", {"amount": {"type": "number"}}))  # no local activity: a submitter
    rig.activity("local", lambda call: 1)  # this process's own activity, live by the rig's choice
    yield rig
    rig.executor.leases.stop()


def the_call(rig: Rig, job_id: str):
    (record,) = rig.store.call_records(job_id).values()
    return record


def test_a_known_activity_without_a_live_worker_stays_explicit_on_its_queue(rig: Rig, clock: ManualClock):
    RedisFleet(rig.store).announce_worker("w1", WorkerAnnouncement("w1", activities=(PAY,)), ttl_s=3)
    clock.advance(10)  # every worker of `pay` is gone (a rolling restart)
    assert RedisFleet(rig.store).live_activities() == {}
    known = rig.service.known_activities()
    assert (known["pay"]["live"], known["pay"]["workers"], known["pay"]["queue"]) == (False, [], "payments")

    record = the_call(rig, rig.service.submit(JOB))
    assert (record.mode, record.activity, record.task, record.queue) == (
        CallMode.EXPLICIT, "pay", activity_task("pay"), "payments")
    assert [r.id for _, r in rig.dispatcher.sent] == [record.id]  # sent to its queue, where it waits


def test_a_forgotten_or_long_gone_activity_turns_its_tools_latent(rig: Rig, clock: ManualClock):
    RedisFleet(rig.store).announce_worker("w1", WorkerAnnouncement("w1", activities=(PAY,)), ttl_s=3)
    clock.advance(10)
    assert RedisFleet(rig.store).forget_activity("pay")
    record = the_call(rig, rig.service.submit(JOB))
    assert (record.mode, record.activity, record.task) == (CallMode.LATENT, "", LATENT_TASK)

    RedisFleet(rig.store).announce_worker("w1", WorkerAnnouncement("w1", activities=(PAY,)), ttl_s=3)
    clock.advance(3601)  # past AGENTQ_ACTIVITY_MEMORY_S
    assert "pay" not in rig.service.known_activities()
    assert the_call(rig, rig.service.submit(JOB)).mode is CallMode.LATENT


def test_local_activities_count_as_live_and_known(rig: Rig, clock: ManualClock):
    known = rig.service.known_activities()
    assert known["local"]["live"] is True and known["local"]["queue"] == activity_task("local")
    # remembered from an announcement that expired, the local registry still makes it live
    local = {"name": "local", "queue": "elsewhere"}
    RedisFleet(rig.store).announce_worker("w1", WorkerAnnouncement("w1", activities=(local,)), ttl_s=3)
    clock.advance(10)
    local = rig.service.known_activities()["local"]
    assert (local["live"], local["queue"]) == (True, activity_task("local"))
