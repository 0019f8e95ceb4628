"""Job concurrency keys (docs/tenants.md, `options.concurrency`): at most `limit` jobs of a tenant holding a key run at
once; the others are accepted, wait (`waiting`) and start in order as jobs holding the key end — by success, failure or
cancel. Real Redis, real in-process Celery workers; each job's activity writes when it starts and ends in a ledger."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest

from agentq.errors import JobValidationError, NonRetryableError
from tests.integration.conftest import Harness, store_of
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(90)


class Ledger:
    """When each job's activity started and ended (monotonic s), and a gate the tests may close."""

    def __init__(self) -> None:
        self.spans: dict[int, list[float]] = {}
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.open = threading.Event()
        self.open.set()

    def work(self, call: dict) -> int:
        n = call["n"]
        with self.lock:
            self.spans[n] = [time.monotonic()]
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            assert self.open.wait(30)
            time.sleep(0.15)
            if call.get("fail"):
                raise NonRetryableError("it fails", type="Boom")
            return n
        finally:
            with self.lock:
                self.running -= 1
                self.spans[n].append(time.monotonic())


@pytest.fixture
def ledger(harness: Harness) -> Ledger:
    ledger = Ledger()
    harness.tool("work", params={"n": {"type": "integer"}, "fail": {"type": "boolean"}})
    harness.activities.register("work", ledger.work)
    start_worker(harness, concurrency=8)
    return ledger


def job(n: int, limit: int = 1, key: str = "acct-42", **params: object) -> dict:
    return {"calls": [{"_tool": "work", "n": n, **params, "_outputPath": "†state.n"}],
            "options": {"concurrency": [{"key": key, "limit": limit}]}}


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_jobs_sharing_a_key_of_limit_1_never_overlap_and_all_finish_in_order(harness: Harness, ledger: Ledger):
    client = harness.client()
    handles = [client.submit(job(n)) for n in range(5)]
    records = [h.result(timeout=30) for h in handles]
    assert [r["status"] for r in records] == ["succeeded"] * 5
    assert [r["state"] for r in records] == [{"n": n} for n in range(5)]
    spans = sorted(ledger.spans.values())
    assert len(spans) == 5 and ledger.most == 1
    for before, after in itertools.pairwise(spans):
        assert before[1] <= after[0], f"jobs overlapped: {before} and {after}"
    assert sorted(ledger.spans, key=lambda n: ledger.spans[n][0]) == list(range(5))  # first come, first served


def test_a_limit_of_2_runs_at_most_2_at_once(harness: Harness, ledger: Ledger):
    client = harness.client()
    handles = [client.submit(job(n, limit=2)) for n in range(6)]
    assert [h.result(timeout=30)["status"] for h in handles] == ["succeeded"] * 6
    assert ledger.most == 2
    other = [client.submit(job(n, limit=2, key="acct-7")) for n in range(10, 12)]  # another key: not held back
    assert [h.result(timeout=30)["status"] for h in other] == ["succeeded"] * 2


def test_a_waiting_job_shows_it_and_a_canceled_one_never_starts(harness: Harness, ledger: Ledger):
    ledger.open.clear()
    client = harness.client()
    first = client.submit(job(0))
    wait_for(lambda: 0 in ledger.spans)
    waiting, after = client.submit(job(1)), client.submit(job(2))
    assert waiting.status() == "waiting" and waiting.record()["status"] == "waiting"
    queued = [e for e in waiting.events(follow=False) if e.event == "job.queued"]
    assert [e.data["status"] for e in queued] == ["waiting"]
    assert waiting.cancel() == "canceled"
    ledger.open.set()
    assert first.result(timeout=30)["status"] == "succeeded"
    assert after.result(timeout=30)["status"] == "succeeded"
    assert waiting.record()["status"] == "canceled" and 1 not in ledger.spans  # never started
    queued = [e for e in after.events(follow=False) if e.event == "job.queued"]
    assert [e.data["status"] for e in queued] == ["waiting", "queued"]  # it waited, then was let in


def test_a_job_that_fails_releases_its_key(harness: Harness, ledger: Ledger):
    client = harness.client()
    failing, next_one = client.submit(job(0, fail=True)), client.submit(job(1))
    assert failing.result(timeout=30)["status"] == "failed"
    assert next_one.result(timeout=30)["status"] == "succeeded"
    assert ledger.spans[0][1] <= ledger.spans[1][0]


def test_keys_are_per_tenant(harness: Harness, ledger: Ledger):
    ledger.open.clear()
    acme, globex = harness.client(tenant="acme"), harness.client(tenant="globex")
    held = acme.submit(job(0))
    wait_for(lambda: 0 in ledger.spans)
    other = globex.submit(job(1))  # globex's "acct-42" is not acme's
    wait_for(lambda: 1 in ledger.spans)
    waiting = acme.submit(job(2))
    assert waiting.status() == "waiting"
    ledger.open.set()
    assert [h.result(timeout=30)["status"] for h in (held, other, waiting)] == ["succeeded"] * 3


def test_a_malformed_concurrency_option_names_every_problem_and_writes_nothing(harness: Harness, ledger: Ledger):
    client = harness.client()
    bad = {"calls": [{"_tool": "work", "n": 1}],
           "options": {"concurrency": [{"key": "", "limit": 0}, {"key": "a", "limit": True}, "x",
                                       {"key": "a", "limit": 2, "extra": 1}]}}
    with pytest.raises(JobValidationError) as rejected:
        client.submit(bad, job_id="job_bad_keys")
    pointers = {p.pointer for p in rejected.value.problems}
    assert pointers == {"/options/concurrency/0/key", "/options/concurrency/0/limit", "/options/concurrency/1/limit",
                        "/options/concurrency/2", "/options/concurrency/3/extra", "/options/concurrency/3/key"}
    assert not store_of(client).redis.exists(store_of(client).keys("job_bad_keys").job)
    with pytest.raises(JobValidationError) as rejected:
        client.submit({"calls": [], "options": {"concurrency": {"key": "a"}}})
    assert [p.pointer for p in rejected.value.problems] == ["/options/concurrency"]


def test_a_lost_release_is_swept_by_the_dispatchers_heartbeat(harness: Harness, ledger: Ledger):
    """The process that ended a job died before releasing its keys, and no job that would wait comes to look: a
    dispatcher's heartbeat (every AGENTQ_HEARTBEAT_S) finds the ended holder and lets the next job in."""
    from agentq.protocol.envelopes import JobFinished
    from agentq.protocol.records import JobRecord
    from agentq.protocol.status import JobStatus

    client = harness.client()
    store = store_of(client)
    ghost = client.submit({"calls": [], "options": {"concurrency": [{"key": "acct-42", "limit": 1}]}},
                          job_id="job_ghost")
    wait_for(lambda: ghost.status() == "succeeded")  # it awaited no call: it ended (and released) at once
    store.redis.zadd(store.fleet.concurrency_prefix("default") + "h:acct-42", {"job_ghost": time.time() + 3600})
    store.redis.hset(store.fleet.concurrency("default"), "job_ghost",  # as if its release never ran
                     json.dumps({"k": [["acct-42", 1]], "x": time.time() + 3600, "p": 0}))
    waiting = client.submit(job(1))  # its admission's look finds the ended holder: it is let in at once
    assert waiting.result(timeout=30)["status"] == "succeeded"

    held = client.submit(job(2))
    record = JobRecord(id=held.id, status=JobStatus.FAILED, tenant="default")
    ledger.open.clear()
    second = client.submit(job(3))
    assert second.status() == "waiting"
    wait_for(lambda: 2 in ledger.spans)
    assert store.finalize(held.id, record=record, event=JobFinished(job_id=held.id, status="failed"))  # no release
    ledger.open.set()
    assert second.result(timeout=30)["status"] == "succeeded"  # the sweep let it in
