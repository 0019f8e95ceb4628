"""A job written by a submitter that died before it sent the job's first tasks (docs/waits.md#delayed-jobs, "a job
that never started"): its `@unstarted` timer, written in the job's own round trip, has a dispatcher send them a
lease after the write, and the job ends. Real Redis, a real Celery worker and dispatcher (its timer loop), the real
SDK against the fake Messages API; the submitter's `_start` raises as a process killed there would stop."""

from __future__ import annotations

import time

import pytest

from agentq.client import Client
from agentq.protocol.records import JobInfo
from agentq.protocol.status import JobStatus
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import wait_for

pytestmark = pytest.mark.timeout(60)

TIMERS = "agentq:{timers}:due"


def dying_submitter(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Client:
    """A client whose job service writes a job and dies before `_start` sends any of its tasks."""
    client = harness.client()

    def dies(*args: object) -> None:
        raise SystemExit("killed after the write")

    monkeypatch.setattr(client._parts.jobs, "_start", dies)
    return client


def submit_and_die(client: Client, job: dict, job_id: str) -> float:
    submitted = time.monotonic()
    with pytest.raises(SystemExit):
        client.submit(job, job_id=job_id)
    assert client.job(job_id).status() == JobStatus.QUEUED.value
    return submitted


def test_a_plan_job_whose_submitter_died_before_starting_it_still_ends(harness: Harness,
                                                                       monkeypatch: pytest.MonkeyPatch):
    harness.tool("double", params={"x": {"type": "number"}})
    harness.activities.register("double", lambda call: call["x"] * 2)
    worker = harness.worker()
    client = dying_submitter(harness, monkeypatch)
    # a sleep first: its task is the engine's, sent by the submitter alone; an activity job submitted under an id
    # of the client's (as an Idempotency-Key names one) has no admission step written with it either
    sleep_first = {"tools": ["sleep", "double"], "calls": [
        {"_tool": "sleep", "seconds": 0, "_outputPath": "†state.slept"},
        {"_tool": "double", "x": "†state.n", "_outputPath": "†state.d"}], "context": [
        {"type": "state", "data": {"n": 4}}]}
    jobs: dict[str, dict] = {"job_sleep_first_unstarted": sleep_first,
                             "job_activity_unstarted": {"calls": [{"_tool": "double", "x": 21,
                                                                   "_outputPath": "†state.d"}]}}
    submitted = {job_id: submit_and_die(client, job, job_id) for job_id, job in jobs.items()}
    reader = harness.client()
    records = {job_id: reader.job(job_id).result(timeout=30) for job_id in jobs}
    ended = time.monotonic()
    assert records["job_sleep_first_unstarted"]["status"] == "succeeded"
    assert records["job_sleep_first_unstarted"]["state"]["d"] == 8
    assert records["job_activity_unstarted"]["state"] == {"d": 42}
    lease_s = harness.settings.lease_s
    assert ended - min(submitted.values()) < lease_s + 10  # within seconds of the lease, not the job's TTL
    wait_for(lambda: store_of(worker.runtime).redis.zcard(TIMERS) == 0, 10, "the timers to be dropped")


def test_an_agent_job_whose_submitter_died_before_its_first_tick_still_ends(harness: Harness,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             anthropic_env: FakeAnthropic):
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": "hello"})
    harness.worker(llm="anthropic")
    client = dying_submitter(harness, monkeypatch)
    submit_and_die(client, {"context": [{"type": "text", "text": "Say hello"}], "tools": []}, "job_agent_unstarted")
    record = harness.client().job("job_agent_unstarted").result(timeout=30)
    assert (record["status"], record["result"]) == ("succeeded", "hello")
    assert len(anthropic_env.requests) == 1  # its first tick, sent once by the timer


def test_the_step_that_starts_a_job_drops_its_timer(redis_url: str, anthropic_env: FakeAnthropic):
    """On one Redis, the step that starts a job drops its `@unstarted` timer in the same round trip: an agent job's
    first tick, the claim of a plan job's first call, the settle of an idempotent activity's first call (each checked
    job submitted under an id of its own, as an Idempotency-Key names one: no admission step is written with it, so it
    gets the check). All gone by the jobs' ends, long before they are due (a lease after the write: a long lease
    here), so no dispatcher takes them."""
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": "hello"})
    harness = Harness(redis_url, lease_s=60.0)
    try:
        harness.tool("double", params={"x": {"type": "number"}})
        harness.activities.register("double", lambda call: call["x"] * 2)
        harness.tool("triple", params={"x": {"type": "number"}})
        harness.activities.register("triple", lambda call: call["x"] * 3, idempotent=True)
        worker = harness.worker(llm="anthropic")
        redis = store_of(worker.runtime).redis
        client = harness.client()
        jobs = {"job_agent_checked": {"context": [{"type": "text", "text": "Say hello"}], "tools": []},
                "job_claimed_checked": {"calls": [{"_tool": "double", "x": 2, "_outputPath": "†state.d"}]},
                "job_settled_checked": {"calls": [{"_tool": "triple", "x": 2, "_outputPath": "†state.t"}]}}
        # an idempotent call settles in one step once its worker has the tool: this first job brings it
        assert client.submit(jobs["job_settled_checked"]).result(timeout=30)["state"] == {"t": 6}
        handles = [client.submit(job, job_id=job_id) for job_id, job in jobs.items()]
        written = time.time()
        records = [handle.result(timeout=30) for handle in handles]
        assert [r["status"] for r in records] == ["succeeded"] * 3
        assert (records[1]["state"], records[2]["state"]) == ({"d": 4}, {"t": 6})
        # each was written with its check (the timer and this mark go in the job's own round trip) ...
        assert [redis.hget(f"agentq:{{{job_id}}}:job", "start_check") for job_id in jobs] == ["1"] * 3
        # ... and the step that started it dropped it: none is left, and none was due yet
        assert redis.zrange(TIMERS, 0, -1) == []
        assert time.time() < written + 60.0
        assert len(anthropic_env.requests) == 1
    finally:
        harness.close()


def test_a_job_started_by_its_submitter_is_not_sent_again(cluster_harness: Harness):
    """On a cluster (the timers are in another slot than the job's keys), the check stays after the job started: it
    fires a lease after the write and finds the job started: nothing runs twice."""
    harness = cluster_harness
    harness.tool("double", params={"x": {"type": "number"}})
    runs: list[float] = []

    def double(call: dict) -> float:
        runs.append(call["x"])
        return call["x"] * 2

    harness.activities.register("double", double)
    worker = harness.worker()
    redis = store_of(worker.runtime).redis
    handle = harness.client().submit({"calls": [{"_tool": "double", "x": 3, "_outputPath": "†state.d"}]},
                                     job_id="job_checked_on_a_cluster")
    assert handle.result(timeout=30)["state"] == {"d": 6}
    assert redis.zrange(TIMERS, 0, -1) == [f"{handle.id} @unstarted"]  # the job ended, its check is still due
    wait_for(lambda: redis.zcard(TIMERS) == 0, harness.settings.lease_s + 10, "the timer to fire and be dropped")
    assert runs == [3]
    assert [e.envelope.to_dict()["event"] for e in handle.events(follow=False)].count("job.finished") == 1


def test_a_scheduled_job_whose_start_was_cut_after_its_status_flipped_still_ends(harness: Harness,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    """The dispatcher that fires a scheduled job's start flips it to `queued` and dies before sending its first
    tasks: the start timer comes back once that claim runs out, finds the job `queued` and sends them."""
    harness.tool("double", params={"x": {"type": "number"}})
    harness.activities.register("double", lambda call: call["x"] * 2)
    worker = harness.worker()
    service, sends = worker.runtime.service, []
    send_first = service._send_first

    def dies_once(info: JobInfo) -> None:
        sends.append(info)
        if len(sends) == 1:
            raise RuntimeError("killed after the status flipped")
        send_first(info)

    monkeypatch.setattr(service, "_send_first", dies_once)
    client = harness.client()
    handle = client.submit({"options": {"delay_s": 0.2},
                            "calls": [{"_tool": "double", "x": 5, "_outputPath": "†state.d"}]})
    record = handle.result(timeout=30)
    assert (record["status"], record["state"]) == ("succeeded", {"d": 10})
    assert len(sends) == 2  # cut once, then sent by the timer's second firing
    wait_for(lambda: store_of(worker.runtime).redis.zcard(TIMERS) == 0, 10, "the timers to be dropped")
