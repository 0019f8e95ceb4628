"""The firing loop's decisions, slot by slot, on real Redis with the time given (agentq/runtime/schedule_loop.py):
the overlap policies (skip, buffer_one, allow), a slot found fired already (a dispatcher died before it moved the
schedule on), the catch-up window, and one leaseholder at a time. A job whose call waits for a reviewer stays
active until the test cancels it, so "the last run is running" needs no timing."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agentq.client import Client
from agentq.runtime.schedule_loop import ScheduleLoop
from tests.integration.conftest import Harness

HELD = {"calls": [{"_tool": "held", "x": 1, "_outputPath": "†state.x"}], "options": {"approval": ["held"]}}


@pytest.fixture
def client(harness: Harness) -> Client:
    harness.tool("held", params={"x": {"type": "number"}})
    return harness.client(tools=harness.tools)


def first_slot(view: dict) -> int:
    return int(datetime.fromisoformat(view["next_runs"][0]).timestamp())


def state(client: Client, name: str) -> dict:
    view = client.schedules.get(name)
    return {"last": view["last_job"] and view["last_job"]["id"], "pending": view["pending"], **view["counts"]}


@pytest.mark.parametrize(("overlap", "fired", "skipped", "pending"), [
    ("skip", ["s0", "s3"], 2, None),  # s1 and s2 skipped while s0 runs; s3 fires once it ended
    ("buffer_one", ["s0", "s1", "s3"], 1, None),  # s1 kept and fired when s0 ended, s2 skipped; s3 after s1 ended
    ("allow", ["s0", "s1", "s2", "s3"], 0, None),
])
def test_the_overlap_policy_decides_the_slots_that_come_while_the_last_run_is_running(client, overlap, fired, skipped,
                                                                                   pending):
    loop = ScheduleLoop(client._parts.schedules)
    s0 = first_slot(client.schedules.set("p", {"every_s": 2, "job": HELD, "overlap": overlap}))
    slots = {f"s{i}": s0 + 2 * i for i in range(4)}
    job = {name: f"sched-p-{slot}" for name, slot in slots.items()}
    for i in range(3):
        loop.fire("p", slots[f"s{i}"] + 0.1)
    active = [j for j in job.values() if exists(client, j)]
    for job_id in active:  # the runs end
        client.job(job_id).cancel()
    loop.fire("p", slots["s2"] + 0.5)  # a buffered slot fires once the run before it ended
    for job_id in [j for j in job.values() if exists(client, j) and j not in active]:
        client.job(job_id).cancel()
    loop.fire("p", slots["s3"] + 0.1)
    assert [name for name, job_id in job.items() if exists(client, job_id)] == fired
    assert state(client, "p") == {"last": job[fired[-1]], "pending": pending, "fired": len(fired),
                                  "skipped": skipped, "missed": 0, "failed": 0}


def test_a_slot_fired_by_a_dispatcher_that_died_is_recorded_not_fired_again(client):
    loop = ScheduleLoop(client._parts.schedules)
    s0 = first_slot(client.schedules.set("dead", {"every_s": 2, "job": HELD, "overlap": "allow"}))
    client.submit(HELD, job_id=f"sched-dead-{s0}")  # what the dead dispatcher wrote before it moved the state on
    loop.fire("dead", s0 + 0.1)
    assert state(client, "dead") == {"last": f"sched-dead-{s0}", "pending": None, "fired": 0, "skipped": 0,
                                     "missed": 0, "failed": 0}
    loop.fire("dead", s0 + 0.2)  # nothing is due any more
    assert state(client, "dead")["fired"] == 0


def test_old_slots_a_dispatcher_fired_before_it_died_count_as_fired_not_missed(client):
    """A dispatcher that fired slots and died before it moved the state on, then an outage longer than the catch-up
    window: the slots whose jobs exist are recorded as fired (a CI run once counted one of them missed), the ones
    after them are missed, the newer ones fire."""
    loop = ScheduleLoop(client._parts.schedules)
    s0 = first_slot(client.schedules.set("gap", {"every_s": 2, "job": HELD, "overlap": "allow",
                                                 "catchup_window_s": 7}))
    for slot in (s0, s0 + 2):  # what the dead dispatcher wrote before it moved the state on
        client.submit(HELD, job_id=f"sched-gap-{slot}")
    loop.fire("gap", s0 + 20.5)  # eleven slots passed: s0 .. s0 + 20
    fired = [s0 + 2 * i for i in range(11) if exists(client, f"sched-gap-{s0 + 2 * i}")]
    assert fired == [s0, s0 + 2, s0 + 14, s0 + 16, s0 + 18, s0 + 20]
    assert state(client, "gap")["missed"] == 5 and state(client, "gap")["fired"] == 4


def test_slots_older_than_the_catch_up_window_are_missed_and_the_newer_ones_fire(client):
    loop = ScheduleLoop(client._parts.schedules)
    s0 = first_slot(client.schedules.set("late", {"every_s": 2, "job": HELD, "overlap": "allow",
                                                  "catchup_window_s": 7}))
    loop.fire("late", s0 + 20.5)  # eleven slots passed: s0 .. s0 + 20
    fired = [s0 + 2 * i for i in range(11) if exists(client, f"sched-late-{s0 + 2 * i}")]
    assert fired == [s0 + 14, s0 + 16, s0 + 18, s0 + 20]  # within 7 s of now
    assert state(client, "late")["missed"] == 7


def test_one_loop_at_a_time_holds_the_lease(client):
    first, second = ScheduleLoop(client._parts.schedules), ScheduleLoop(client._parts.schedules)
    assert first._renew() and not second._renew()
    first.holding = True
    first.stop()  # a clean stop gives the lease back
    assert second._renew()


def exists(client: Client, job_id: str) -> bool:
    from agentq.errors import JobNotFoundError

    try:
        client.job(job_id)
    except JobNotFoundError:
        return False
    return True


def test_the_async_client_has_the_same_operations(harness, client):
    import asyncio

    from agentq.async_client import AsyncClient

    async def scenario() -> tuple[dict, list[str], dict, str]:
        async with AsyncClient(settings=harness.settings, tools=harness.tools, tenant="acme") as acme:
            stored = await acme.schedules.set("nightly", {"cron": "0 8 * * *", "timezone": "Asia/Tokyo",
                                                          "job": HELD})
            names = [s["name"] for s in await acme.schedules.list()]
            paused = await acme.schedules.pause("nightly")
            job_id = await acme.schedules.trigger("nightly")
            await acme.schedules.delete("nightly")
            return stored, names, paused, job_id

    stored, names, paused, job_id = asyncio.run(scenario())
    assert stored["tenant"] == "acme" and names == ["nightly"] and paused["next_runs"] == []
    tokyo = datetime.fromisoformat(stored["next_runs"][0]).astimezone(ZoneInfo("Asia/Tokyo"))
    assert (tokyo.hour, tokyo.minute) == (8, 0)
    assert client.job(job_id).status() == "awaiting_approval"  # submitted now: its call waits for a reviewer
    assert client.schedules.list() == []


def test_a_loop_taking_the_lease_gives_due_times_back_to_schedules_that_lost_theirs(client):
    """What a store restored without its `due` set (or a due entry lost) leaves: the schedules fire again."""
    s0 = first_slot(client.schedules.set("kept", {"every_s": 2, "job": HELD}))
    client.schedules.set("asleep", {"every_s": 2, "job": HELD, "paused": True})
    schedules = client._parts.schedules.store
    schedules.redis.delete(schedules.due)
    loop = ScheduleLoop(client._parts.schedules)
    assert loop._renew()
    assert schedules.due_of() == {"kept": s0 * 1000}  # the paused one stays without


def test_without_schedules_no_loop_takes_the_lease_or_writes_a_key(client):
    loop = ScheduleLoop(client._parts.schedules)
    schedules = client._parts.schedules.store
    loop.run_once()
    assert not loop.holding and schedules.redis.keys("agentq:{schedules}:*") == []
    client.schedules.set("one", {"every_s": 60, "job": HELD})
    loop.run_once()
    assert loop.holding and schedules.redis.get(schedules.lease_key) == loop.token
