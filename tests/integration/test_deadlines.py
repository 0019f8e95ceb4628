"""A job's deadline (docs/waits.md#deadlines) with real processes: real Redis, a real `agentq dispatcher`, a real
worker. A job still running at `options.deadline_s` fails with DeadlineExceeded; its running call is canceled and
its late outcome never reaches the job."""

from __future__ import annotations

import time

from agentq.client import Client
from agentq.protocol.status import CallStatus
from agentq.settings import Settings
from tests.integration.procs import WorkerProcs, wait_for
from tests.integration.procs_activities import runs_key
from tests.integration.timers import due_timers


def test_a_job_past_its_deadline_fails_and_its_running_call_never_commits(worker_procs: WorkerProcs,
                                                                            redis_url: str):
    dispatcher = worker_procs.dispatcher()
    # one slot: the second job's call starts only once the slow call's task is over (its late commit tried)
    worker = worker_procs.start(serve=["procSlow", "procA"], concurrency=1)
    worker_procs.wait_dispatcher(dispatcher)
    worker_procs.wait_live(worker, ["procSlow", "procA"])
    redis = worker_procs.store.redis
    with Client(settings=Settings(redis_url=redis_url)) as client:
        submitted = time.monotonic()
        handle = client.submit({"calls": [{"_tool": "procSlow", "seconds": 10, "tag": "late",
                                           "_outputPath": "†state.slow"}], "options": {"deadline_s": 2}})
        wait_for(lambda: redis.get(runs_key("procSlow", "late")) == "1", 10, "the slow call to start")
        record = handle.result(timeout=10)
        elapsed = time.monotonic() - submitted
        assert record["status"] == "failed"
        assert record["error"]["type"] == "DeadlineExceeded", record["error"]
        assert 2 <= elapsed < 3, elapsed
        assert record["state"] == {}
        events = [e.envelope.to_dict() for e in handle.events(follow=True)]
        assert events[-1]["event"] == "job.finished" and events[-1]["status"] == "failed"
        assert events[-1]["error"]["type"] == "DeadlineExceeded"
        assert [c["status"] for c in handle.calls()] == [CallStatus.CANCELED.value]
        # a job submitted after: its call runs once the slow one's task ended (one slot), late commit included
        after = client.submit({"calls": [{"_tool": "procA", "x": 1, "_outputPath": "†state.a"}]})
        assert after.result(timeout=20)["status"] == "succeeded"
        late = client.record(handle.id)
    assert late["state"] == {} and late["status"] == "failed"
    assert late["error"]["type"] == "DeadlineExceeded"
    assert not any(e.envelope.to_dict()["event"] == "call.finished" for e in handle.events(follow=False))
    assert not any('"_call"' in m for m in redis.lrange(f"agentq:{{{handle.id}}}:log", 0, -1))  # nothing written
    wait_for(lambda: redis.zscore("agentq:{timers}:due", f"{handle.id} @deadline") is None, 5,
             "the deadline's timer to be dropped")


def test_a_job_that_ends_before_its_deadline_is_left_alone(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker = worker_procs.start(serve=["procA"])
    worker_procs.wait_dispatcher(dispatcher)
    worker_procs.wait_live(worker, ["procA"])
    redis = worker_procs.store.redis
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"calls": [{"_tool": "procA", "x": 1, "_outputPath": "†state.a"}],
                                "options": {"deadline_s": 1}})
        assert handle.result(timeout=10)["status"] == "succeeded"
        wait_for(lambda: redis.zscore("agentq:{timers}:due", f"{handle.id} @deadline") is None, 5,
                 "the deadline's timer to fire and be dropped")
        record = client.record(handle.id)
    assert record["status"] == "succeeded" and record["state"]["a"]["value"] == 2


def test_a_deadline_drops_the_jobs_waits(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    redis = worker_procs.store.redis
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"tools": ["waitForSignal"], "calls": [
            {"_tool": "waitForSignal", "name": "approved", "timeout_s": 600, "_outputPath": "†state.approval"}],
            "options": {"deadline_s": 1.5}})
        record = handle.result(timeout=10)
        assert record["status"] == "failed" and record["error"]["type"] == "DeadlineExceeded"
        assert [c["status"] for c in handle.calls()] == [CallStatus.CANCELED.value]
        wait_for(lambda: due_timers(redis) == [], 5, "the wait's and the deadline's timers to go")
        assert redis.hlen(f"agentq:{{{handle.id}}}:waits") == 0
        assert client.record(handle.id)["state"] == {}
