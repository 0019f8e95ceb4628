"""Live and known activities (docs/protocol.md#activities) with real Redis and separate `agentq worker` processes.

The rolling restart: every worker of an activity goes away for a moment. Its activity stays *known*, so a job
submitted meanwhile composes its tool as explicit (never latent: a model must not imagine a payment) and the
call waits, `ready`, on the activity's queue until a worker serves it again. `forget` retires the activity at
once, and then a new job's tool is latent. The test process imports no activity code: it submits through a
`Client` that knows only what the workers published.
"""

from __future__ import annotations

import json

import pytest

from agentq.client import Client
from agentq.protocol.records import CallMode
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.fleet import RedisFleet
from tests.integration.conftest import store_of
from tests.integration.procs import cli, wait_for

pytestmark = pytest.mark.timeout(90)

QUEUE = "agentq.activity.procA"  # procA declares no queue of its own
JOB = {"context": [{"type": "state", "data": {"x": 1}}],
       "calls": [{"_tool": "procA", "x": "†state.x", "_outputPath": "†state.a"}]}


def _only_call(client: Client, job_id: str):
    (record,) = store_of(client).call_records(job_id).values()
    return record


def _composed_tool(client: Client, job_id: str, tool: str) -> dict:
    store = store_of(client)
    return json.loads(store.redis.hget(store.keys(job_id).tools, tool))


def test_a_rolling_restart_keeps_a_coded_tool_explicit_and_its_call_waits_for_the_next_worker(
        worker_procs, redis_url):
    store = worker_procs.store
    first = worker_procs.start(["procA"])
    announced = worker_procs.wait_live(first, ["procA"])

    # every worker of procA goes away without a goodbye: its announcement has to expire on its own
    first.kill()
    wait_for(lambda: "procA" not in RedisFleet(store).live_activities(), 10, "procA's announcement to expire")

    with Client(redis_url) as client:
        known = client.activities()["procA"]
        assert (known["live"], known["workers"], known["queue"], known["task"]) == (False, [], QUEUE, QUEUE)
        assert known["last_seen"].endswith("Z")
        assert client.live_activities() == {}  # nothing live, yet known

        handle = client.submit(JOB)
        record = _only_call(client, handle.id)
        # composed explicit: `_activity` is the activity's name, and the call is routed to its queue
        assert (record.mode, record.activity, record.task, record.queue) == (
            CallMode.EXPLICIT, "procA", QUEUE, QUEUE)
        assert _composed_tool(client, handle.id, "procA")["properties"]["_activity"] == {
            "type": "string", "const": "procA"}
        # it waits, ready, on the activity's queue (not failed, not handed to the LLM)
        assert handle.status() == JobStatus.QUEUED.value
        assert store.call_statuses(handle.id) == {record.id: CallStatus.READY}
        assert store.redis.llen(QUEUE) == 1
        assert store.redis.llen(client.settings.engine_queue) == 0

        # the activity is served again: the waiting call runs there and the job succeeds
        second = worker_procs.start(["procA"])
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded", record
    assert record["state"]["a"] == {"pid": second.pid, "value": 2}
    assert second.pid != first.pid and announced["pid"] == first.pid
    assert int(store.redis.get("procs:runs:procA:") or 0) == 1


def test_after_forget_a_new_jobs_tool_is_latent(worker_procs, redis_url):
    store = worker_procs.store
    proc = worker_procs.start(["procA"])
    worker_procs.wait_live(proc, ["procA"])
    proc.stop()  # a warm shutdown retires the worker's announcement at once
    assert not proc.alive()
    wait_for(lambda: "procA" not in RedisFleet(store).live_activities(), 10, "procA's workers to be retired")

    shown = cli(redis_url, "activities", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["procA"]["live"] is False

    forgot = cli(redis_url, "activities", "forget", "procA")
    assert forgot.returncode == 0 and forgot.stderr == "", forgot
    assert "procA" in forgot.stdout

    with Client(redis_url) as client:
        assert "procA" not in client.activities()
        handle = client.submit(JOB)
        record = _only_call(client, handle.id)
        assert (record.mode, record.activity, record.queue) == (
            CallMode.LATENT, "", client.settings.engine_queue)
        assert _composed_tool(client, handle.id, "procA")["properties"]["_activity"] == {
            "type": "string", "const": ""}
        assert store.redis.llen(QUEUE) == 0
        assert handle.cancel() == JobStatus.CANCELED.value  # no LLM here: nobody would run the latent call

    again = cli(redis_url, "activities", "forget", "procA")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.startswith("agentq: error: ") and again.stderr.count("\n") == 1, again.stderr


def test_a_client_sees_an_activity_announced_after_its_last_read_at_once(worker_procs, redis_url):
    """A client reuses what the fleet announced for a heartbeat, yet an activity announced since
    its last read is explicit at once: a call the cached view would hand to the model is planned again."""
    store = worker_procs.store
    first = worker_procs.start(["procA"])
    worker_procs.wait_live(first, ["procA"])
    echo_job = {"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}]}

    with Client(redis_url) as client:
        assert client.submit(JOB).result(timeout=30)["status"] == "succeeded"  # the client's view: procA only
        assert "procEcho" not in client._parts.jobs.fleet()[0].known

        second = worker_procs.start(["procEcho"])  # procEcho has a queue of its own: procs.echo
        worker_procs.wait_live(second, ["procEcho"])
        view, cached = client._parts.jobs.fleet()
        assert cached and "procEcho" not in view.known  # still within the heartbeat of the last read

        handle = client.submit(echo_job)
        record = _only_call(client, handle.id)
        assert (record.mode, record.activity, record.queue) == (CallMode.EXPLICIT, "procEcho", "procs.echo")
        result = handle.result(timeout=30)
    assert result["status"] == "succeeded", result
    assert result["state"]["echo"] == {"pid": second.pid, "text": "hi"}
    assert int(store.redis.get("procs:runs:procEcho:") or 0) == 1
