"""`agentq.AsyncClient` (docs/protocol.md#the-job-record) against real Redis and a real in-process worker: the same
operations as
`Client`, awaited; waiting holds no thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentq import AsyncClient
from agentq.errors import ConflictError, JobNotFoundError, JobTimeoutError, JobValidationError
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def worked(harness):
    gate = threading.Event()
    harness.tool("echo", params={"text": {"type": "string"}}, required=["text"])
    harness.tool("gate", params={})
    harness.activities.register("echo", lambda call: {"said": call["text"]})
    harness.activities.register("gate", lambda call: gate.wait(30) and "passed")
    start_worker(harness)
    return gate


def test_submit_follow_events_and_result(harness, worked):
    async def scenario() -> tuple[dict, list[str], dict, list[dict]]:
        async with AsyncClient(settings=harness.settings) as client:
            handle = await client.submit({"calls": [
                {"_tool": "echo", "text": "hi", "_outputPath": "†state.a"},
                {"_tool": "echo", "text": "†state.a.said", "_outputPath": "†state.b"}]})
            names = [event.event async for event in handle.events()]
            record = await handle.result(timeout=20)
            assert await handle.status() == "succeeded"
            return record, names, await handle.history(), await handle.calls()

    record, names, history, calls = asyncio.run(scenario())
    assert record["state"] == {"a": {"said": "hi"}, "b": {"said": "hi"}}
    assert names[0] == "job.queued" and names[-1] == "job.finished"
    assert names.count("call.finished") == 2
    assert [p["activity_type"] for p in history["parts"]].count("tool_call") == 2
    assert [c["status"] for c in calls] == ["done", "done"]


def test_many_jobs_followed_at_once_on_one_event_loop(harness, worked):
    async def scenario() -> list[list[str]]:
        async with AsyncClient(settings=harness.settings) as client:
            handles = [await client.submit({"calls": [
                           {"_tool": "gate", "_outputPath": "†state.g"},
                           {"_tool": "echo", "text": f"job {n}", "_outputPath": "†state.e"}]})
                       for n in range(20)]

            async def follow(handle) -> list[str]:
                return [event.event async for event in handle.events()]

            followers = [asyncio.create_task(follow(h)) for h in handles]
            while client._reads.hub.followed < 20:  # all twenty wait on the one blocking read
                await asyncio.sleep(0.01)
            assert threading.active_count() < 60
            worked.set()
            return await asyncio.gather(*followers)

    for names in asyncio.run(scenario()):
        assert names[-1] == "job.finished" and names.count("call.finished") == 2


def test_errors_and_approvals(harness, worked):
    async def scenario() -> None:
        async with AsyncClient(settings=harness.settings) as client:
            with pytest.raises(JobValidationError) as rejected:
                await client.submit({"calls": [{"_tool": "nope"}]})
            assert rejected.value.problems[0].pointer == "/calls/0/_tool"
            with pytest.raises(JobNotFoundError):
                await client.job("nope")
            handle = await client.submit({"calls": [{"_tool": "echo", "text": "x", "_outputPath": "†state.x"}],
                                          "options": {"approval": ["echo"]}})
            with pytest.raises(JobTimeoutError):
                await handle.result(timeout=0.3)
            call_id = (await handle.calls())[0]["id"]
            edited = await handle.edit(call_id, {"text": "edited"})
            assert edited["id"] == call_id
            with pytest.raises(ConflictError):
                await handle.approve(call_id)
            record = await handle.result(timeout=20)
            assert record["state"] == {"x": {"said": "edited"}}
            later = await client.job(handle.id)
            assert [e.event async for e in later.events(follow=False)][-1] == "job.finished"

    asyncio.run(scenario())


def test_result_and_events_of_an_ended_job_cost_the_same_round_trips_on_both_clients(harness, worked):
    """Both handles run the same steps of `store/core.py`: `result` of an ended job is one pipeline (the wait on
    its end signal and the read of its saved record), following its stream one read; a wait that times out
    reads the status once after its pipeline."""
    from tests.redis_trips import RoundTrips

    job = {"calls": [{"_tool": "echo", "text": "hi", "_outputPath": "†state.a"}]}

    async def scenario() -> tuple[str, dict, list[list[list[str]]]]:
        async with AsyncClient(settings=harness.settings) as client:
            handle = await client.submit(job)
            record = await handle.result(timeout=20)
            trips = RoundTrips(client._reads.redis)
            assert await handle.result(timeout=20) == record
            ended = trips.take()
            names = [event.event async for event in handle.events()]
            assert names[0] == "job.queued" and names[-1] == "job.finished"
            followed = trips.take()
            waiting = await client.submit({"calls": [{"_tool": "gate", "_outputPath": "†state.g"}]})
            trips.take()
            with pytest.raises(JobTimeoutError):
                await waiting.result(timeout=0.3)
            timed_out = trips.take()
            worked.set()
            return handle.id, record, [ended, followed, timed_out]

    job_id, record, async_trips = asyncio.run(scenario())
    assert async_trips == [[["BLMOVE", "HGETALL"]], [["XREAD"]], [["BLMOVE", "HGETALL"], ["HGET"]]]

    client = harness.client()
    handle = client.job(job_id)
    trips = RoundTrips(client._parts.store.redis)
    assert handle.result(timeout=20) == record
    ended = trips.take()
    assert [event.event for event in handle.events()][-1] == "job.finished"
    assert [ended, trips.take()] == async_trips[:2]
