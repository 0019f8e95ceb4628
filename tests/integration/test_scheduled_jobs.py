"""Jobs submitted for later (docs/waits.md#delayed-jobs) with real processes: real Redis, real `agentq dispatcher`
processes, a real worker and the real HTTP API. A job with `options.delay_s` or `start_at` is `scheduled` until
its time, then started by whichever dispatcher takes its timer, so a dispatcher killed with SIGKILL loses none."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agentq.client import Client
from agentq.settings import Settings
from tests.api_server import ApiServer
from tests.integration.procs import WorkerProcs, wait_for
from tests.integration.procs_activities import runs_key

TIMERS = "agentq:{timers}:due"


@pytest.fixture
def api(redis_url: str) -> Iterator[ApiServer]:
    with ApiServer(Settings(redis_url=redis_url)) as server:
        yield server


def _status(api: ApiServer, job_id: str) -> str:
    return str(api.request("GET", f"/v1/jobs/{job_id}").json()["status"])


def test_a_delayed_job_is_scheduled_then_started_by_another_dispatcher(worker_procs: WorkerProcs, api: ApiServer):
    first = worker_procs.dispatcher()
    worker = worker_procs.start(serve=["procA"])
    worker_procs.wait_dispatcher(first)
    worker_procs.wait_live(worker, ["procA"])
    submitted = time.time()
    created = api.request("POST", "/v1/jobs", json_body={
        "calls": [{"_tool": "procA", "x": 1, "tag": "later", "_outputPath": "†state.a"}], "options": {"delay_s": 2}})
    assert created.status == 201, created.body
    job_id = created.json()["id"]
    assert _status(api, job_id) == "scheduled"
    first.kill()  # SIGKILL while the job waits for its time: its timer is in Redis
    second = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(second)
    record = wait_for(lambda: (r := api.request("GET", f"/v1/jobs/{job_id}").json())["status"] == "succeeded" and r,
                      20, "the delayed job to run")
    assert record["state"]["a"]["value"] == 2
    started = datetime.fromisoformat(record["finished_at"].replace("Z", "+00:00")).timestamp()
    assert started - submitted >= 2
    with Client(settings=Settings(redis_url=worker_procs.redis_url)) as client:
        events = [e.envelope.to_dict() for e in client.job(job_id).events(follow=False)]
    assert [e["status"] for e in events if e["event"] == "job.queued"] == ["scheduled", "queued"]
    wait_for(lambda: worker_procs.store.redis.zcard(TIMERS) == 0, 5, "the start timer to be dropped")


def test_a_scheduled_job_can_be_canceled_and_never_starts(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker = worker_procs.start(serve=["procA"])
    worker_procs.wait_dispatcher(dispatcher)
    worker_procs.wait_live(worker, ["procA"])
    redis = worker_procs.store.redis
    start_at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"calls": [{"_tool": "procA", "x": 1, "tag": "never", "_outputPath": "†state.a"}],
                                "options": {"start_at": start_at}})
        assert handle.status() == "scheduled"
        assert handle.cancel() == "canceled"
        wait_for(lambda: redis.zcard(TIMERS) == 0, 10, "the start timer to come due and be dropped")
        assert handle.status() == "canceled"
        assert [c["status"] for c in handle.calls()] == ["canceled"]
    assert redis.get(runs_key("procA", "never")) is None


def test_bad_start_times_are_refused_and_nothing_is_written(worker_procs: WorkerProcs, api: ApiServer):
    refused = api.request("POST", "/v1/jobs", json_body={
        "calls": [{"_tool": "procA", "x": 1, "tag": "t"}], "options": {"start_at": "soon", "delay_s": -5}})
    assert refused.status == 422, refused.body
    pointers = [p["pointer"] for p in refused.json()["error"]["problems"]]
    assert pointers.count("/options/delay_s") == 2 and "/options/start_at" in pointers
    redis = worker_procs.store.redis
    assert redis.zcard(TIMERS) == 0 and redis.keys("agentq:{job_*") == []
