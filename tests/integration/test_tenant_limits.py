"""A tenant's limits (docs/tenants.md, `AGENTQ_TENANTS`) hold for every way a job is submitted: the Python client raises
`RateLimited` with the wait and writes nothing; a job sent as the `agentq.engine.submit` task waits in the broker
(the task is retried after the wait) and runs once its tenant has room. Real Redis, real in-process workers."""

from __future__ import annotations

import threading
import time

import pytest

from agentq import RateLimited
from tests.integration.conftest import Harness, store_of
from tests.integration.test_job_validation import sender
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def gated(harness: Harness) -> threading.Event:
    """A tool `hold` whose activity waits until the test sets the event, and a started worker; tenant `acme` may
    have one active job."""
    harness.settings = harness.settings.model_copy(update={"tenants": {"acme": {"max_active_jobs": 1}}})
    opened = threading.Event()
    harness.tool("hold", params={"n": {"type": "integer"}})
    harness.activities.register("hold", lambda call: opened.wait(30) and call["n"])
    start_worker(harness)
    return opened


def job(n: int) -> dict:
    return {"calls": [{"_tool": "hold", "n": n, "_outputPath": "†state.n"}]}


def test_the_client_raises_rate_limited_and_writes_nothing(harness: Harness, gated: threading.Event):
    client = harness.client(tenant="acme")
    first = client.submit(job(1))
    with pytest.raises(RateLimited) as refused:
        client.submit(job(2), job_id="job_refused")
    assert refused.value.tenant == "acme" and refused.value.retry_after_s > 0
    assert "1 active jobs" in str(refused.value) and "nothing was written" in str(refused.value)
    assert not store_of(client).redis.exists(store_of(client).keys("job_refused").job)
    assert harness.client(tenant="globex").submit(job(3)).id  # another tenant is not limited
    gated.set()
    assert first.result(timeout=30)["status"] == "succeeded"
    assert client.submit(job(4)).result(timeout=30)["state"] == {"n": 4}


def test_a_task_submission_over_the_limit_waits_in_the_broker_then_runs(harness: Harness, gated: threading.Event):
    from celery.signals import task_retry

    retried = threading.Event()

    def on_retry(sender: object = None, **_: object) -> None:
        if getattr(sender, "name", "") == "agentq.engine.submit":
            retried.set()

    task_retry.connect(on_retry, weak=False)
    harness.on_close(lambda: task_retry.disconnect(on_retry))
    client = harness.client(tenant="acme")
    first = client.submit(job(1))
    sender(harness).send_task("agentq.engine.submit", args=[job(2)], kwargs={"job_id": "job_later", "tenant": "acme"})
    assert retried.wait(30), "the submit task was never refused and retried"
    store = store_of(client)
    assert not store.redis.exists(store.keys("job_later").job)  # refused: nothing written
    gated.set()
    assert first.result(timeout=30)["status"] == "succeeded"
    deadline = time.monotonic() + 30
    while not store.redis.exists(store.keys("job_later").job):  # the retried task writes it (after its countdown)
        assert time.monotonic() < deadline, "the retried submit task never wrote the job"
        time.sleep(0.05)
    record = client.job("job_later").result(timeout=30)
    assert record["status"] == "succeeded" and record["tenant"] == "acme" and record["state"] == {"n": 2}
