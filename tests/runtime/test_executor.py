"""Unit tests of the executor on a `StateStore` (the session's private Redis) with a recording dispatcher: no Celery.

A job is submitted through `JobService`; each dispatched record is then run by calling `Executor.run_call`, as
the Celery task would. Acceptance tests of the same paths on real workers live in tests/integration.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from agentq.engine.executor import Executor, Outcome
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.runtime.conftest import Rig, expire_job, expire_now

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def rig(redis_store: StateStore) -> Iterator[Rig]:
    rig = Rig(redis_store)
    yield rig
    rig.executor.leases.stop()


CHAIN = {"context": [{"type": "state", "data": {"x": 1}}],
         "calls": [{"_tool": "first", "x": "†state.x", "_outputPath": "†state.a"},
                   {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"}]}


def chain(rig: Rig) -> None:
    rig.activity("first", lambda call: call["x"] + 1, {"x": {"type": "number"}})
    rig.activity("second", lambda call: call["y"] * 2, {"y": {"type": "number"}})


# ------------------------------------------------------------------------------------------ runs


def test_a_chain_runs_call_after_call_and_the_job_succeeds(rig: Rig):
    chain(rig)
    job_id = rig.submit(CHAIN)
    assert [r.tool for _, r in rig.dispatcher.sent] == ["first"]  # second waits on first
    assert rig.drain() == ["done", "done"]
    assert [r.tool for _, r in rig.dispatcher.sent] == ["first", "second"]
    record = rig.store.record(job_id)
    assert (record.status, record.state) == (JobStatus.SUCCEEDED, {"x": 1, "a": 2, "b": 4})
    assert rig.runs == {"first": 1, "second": 1}
    assert [e["event"] for e in rig.events(job_id)] == [
        "job.queued", "job.started", "call.started", "call.finished", "call.started", "call.finished",
        "job.finished"]
    assert [e["status"] for e in rig.named(job_id, "job.finished")] == ["succeeded"]


def test_job_started_is_published_for_a_job_id_used_again(rig: Rig):
    """A worker remembers which jobs it found started and renders no job.started for their later calls; a job
    id used again after the first job's keys are gone still gets its job.started."""
    rig.activity("first", lambda call: call["x"] + 1, {"x": {"type": "number"}})
    job = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"},
                     {"_tool": "first", "x": 2, "_outputPath": "†state.b"}]}
    job_id = rig.service.submit(job, job_id="job_used_twice")
    assert rig.drain() == ["done", "done"]
    assert [e["event"] for e in rig.events(job_id)].count("job.started") == 1
    expire_job(rig.store, job_id)  # the first job expired
    assert rig.service.submit(job, job_id=job_id) == job_id
    assert rig.drain() == ["done", "done"]
    assert [e["event"] for e in rig.events(job_id)] == [
        "job.queued", "job.started", "call.started", "call.finished", "call.started", "call.finished",
        "job.finished"]


def test_retries_back_off_exponentially_then_succeed(rig: Rig):
    failures = iter([RuntimeError("flaky 1"), RuntimeError("flaky 2")])

    def flaky(call: dict) -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "ok"

    rig.activity("flaky", flaky, retries=2, retry_backoff=0.5)
    job_id = rig.submit({"calls": [{"_tool": "flaky", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["retry", "retry", "done"]
    delays = [o.retry_in for _, o in rig.outcomes if o.status == "retry"]
    assert delays[0] is not None and 0.25 <= delays[0] <= 0.5  # backoff * 2**(attempt-1) * jitter in [0.5, 1]
    assert delays[1] is not None and 0.5 <= delays[1] <= 1.0
    retrying = rig.named(job_id, "call.retrying")
    assert [(e["attempt"], e["error"]["message"]) for e in retrying] == [(1, "flaky 1"), (2, "flaky 2")]
    assert [e["attempt"] for e in rig.named(job_id, "call.started")] == [1, 2, 3]
    assert rig.store.record(job_id).state == {"r": "ok"}


def test_retries_run_out_and_the_job_fails(rig: Rig):
    def broken(call: dict) -> None:
        raise RuntimeError("down")

    rig.activity("broken", broken, retries=1, retry_backoff=0.01)
    job_id = rig.submit({"calls": [{"_tool": "broken", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["retry", "failed"]
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None
    assert record.error.type == "CallsFailed" and "RuntimeError: down" in record.error.message


def test_a_failure_absorbed_by_an_or_branch_does_not_fail_the_job(rig: Rig):
    def declined(call: dict) -> None:
        raise ValueError("card declined")

    rig.activity("charge", declined)
    rig.activity("notify", lambda call: f"told {call['outcome']}", {"outcome": {}})
    job_id = rig.submit({"calls": [
        {"_tool": "charge", "_outputPath": "†state.paid || †state.declined"},
        {"_tool": "notify", "outcome": "†state.paid || †state.declined", "_outputPath": "†state.notice"}]})
    assert rig.drain() == ["failed", "done"]
    record = rig.store.record(job_id)
    assert record.status is JobStatus.SUCCEEDED
    assert record.state["declined"] == {"error": {"type": "ValueError", "message": "card declined"}}
    assert record.state["notice"].startswith("told ")
    assert [e.get("absorbed") for e in rig.named(job_id, "call.finished")] == [True, None]


def test_a_redelivered_finished_call_redispatches_only_ready_dependents_and_finalizes_once(rig: Rig):
    chain(rig)
    job_id = rig.submit(CHAIN)
    first_id, second_id = rig.call_id(job_id, "first"), rig.call_id(job_id, "second")
    first = rig.dispatcher.sent[0][1]
    assert rig.executor.run_call(job_id, first_id, record=first).status == "done"
    assert rig.dispatcher.ids() == [first_id, second_id]
    # redelivered while second is ready (a crash after the commit may have lost its dispatch): sent again
    assert rig.executor.run_call(job_id, first_id, record=first).status == "finished"
    assert rig.dispatcher.ids() == [first_id, second_id, second_id]
    assert rig.executor.run_call(job_id, second_id).status == "done"
    # after the job ended: nothing dispatched, nothing finalized again
    assert rig.executor.run_call(job_id, first_id, record=first).status == "finished"
    assert rig.executor.run_call(job_id, second_id).status == "finished"
    assert rig.dispatcher.ids() == [first_id, second_id, second_id]
    assert len(rig.named(job_id, "job.finished")) == 1
    assert rig.runs == {"first": 1, "second": 1}


def test_a_redelivery_finalizes_a_job_whose_finalization_was_lost(rig: Rig, monkeypatch: pytest.MonkeyPatch):
    rig.activity("only", lambda call: 1)
    job_id = rig.submit({"calls": [{"_tool": "only", "_outputPath": "†state.r"}]})
    call_id = rig.call_id(job_id, "only")
    with monkeypatch.context() as patch:  # the process dies between the commit and the finalization
        patch.setattr(rig.executor.progress, "finish", lambda job_id, **_: False)
        assert rig.executor.run_call(job_id, call_id).status == "done"
    assert rig.store.job_status(job_id) is JobStatus.RUNNING
    assert rig.executor.run_call(job_id, call_id).status == "finished"
    assert rig.store.job_status(job_id) is JobStatus.SUCCEEDED
    assert rig.runs == {"only": 1}


def test_a_leased_call_is_not_run_again_and_asks_for_a_retry(rig: Rig):
    started, release = threading.Event(), threading.Event()

    def slow(call: dict) -> str:
        started.set()
        assert release.wait(5)
        return "once"

    rig.activity("slow", slow)
    job_id = rig.submit({"calls": [{"_tool": "slow", "_outputPath": "†state.r"}]})
    call_id = rig.call_id(job_id, "slow")
    results: list[Outcome] = []
    runner = threading.Thread(target=lambda: results.append(rig.executor.run_call(job_id, call_id)))
    runner.start()
    assert started.wait(5)
    leased = rig.executor.run_call(job_id, call_id)
    assert leased.status == "leased" and leased.retry_in is not None and 0.1 <= leased.retry_in <= 30.0
    release.set()
    runner.join(5)
    assert [o.status for o in results] == ["done"]
    assert rig.runs == {"slow": 1}
    assert rig.store.record(job_id).state == {"r": "once"}


def test_duplicate_concurrent_deliveries_run_the_handler_once(rig: Rig):
    rig.activity("work", lambda call: "result")
    job_id = rig.submit({"calls": [{"_tool": "work", "_outputPath": "†state.r"}]})
    call_id = rig.call_id(job_id, "work")
    record = rig.dispatcher.sent[0][1]
    barrier = threading.Barrier(2)
    results: list[str] = []

    def deliver() -> None:
        barrier.wait(5)
        results.append(rig.executor.run_call(job_id, call_id, record=record).status)

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert "done" in results and len(results) == 2
    assert set(results) <= {"done", "leased", "finished"}
    assert rig.runs == {"work": 1}
    assert len(rig.named(job_id, "call.finished")) == 1 and len(rig.named(job_id, "job.finished")) == 1


def test_an_expired_lease_lets_a_redelivery_take_the_call_over(rig: Rig):
    rig.activity("work", lambda call: "again")
    job_id = rig.submit({"calls": [{"_tool": "work", "_outputPath": "†state.r"}]})
    call_id = rig.call_id(job_id, "work")
    # an attempt claimed the call and its process died
    rig.store.claim(job_id, call_id, token="dead", lease_ms=1000)
    assert rig.executor.run_call(job_id, call_id).status == "leased"
    expire_now(rig.store, rig.store.keys(job_id).lease(call_id))
    assert rig.executor.run_call(job_id, call_id).status == "done"
    assert [e["attempt"] for e in rig.named(job_id, "call.started")] == [2]
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED


def test_a_forged_task_record_runs_the_stored_call(rig: Rig):
    rig.activity("safe", lambda call: "safe result")
    rig.activity("evil", lambda call: "evil result")
    job_id = rig.submit({"calls": [{"_tool": "safe", "_outputPath": "†state.r"}]})
    stored = rig.dispatcher.sent[0][1]
    forged = CallRecord.from_dict({**stored.to_dict(), "tool": "evil", "activity": "evil",
                                   "call": {"_tool": "evil", "_activity": "evil", "_outputPath": "†state.pwned"}})
    assert rig.executor.run_call(job_id, stored.id, record=forged).status == "done"
    assert rig.runs == {"safe": 1}
    assert rig.store.record(job_id).state == {"r": "safe result"}


def test_a_result_over_the_size_limit_fails_the_call(redis_store: StateStore):
    rig = Rig(redis_store, max_result_bytes=100)
    rig.activity("big", lambda call: "x" * 200)
    job_id = rig.submit({"calls": [{"_tool": "big", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["failed"]
    [event] = rig.named(job_id, "call.finished")
    assert event["error"]["type"] == "ResultTooLarge" and "limit is 100" in event["error"]["message"]
    assert rig.store.record(job_id).status is JobStatus.FAILED
    rig.executor.leases.stop()


def test_a_result_that_is_not_json_fails_the_call(rig: Rig):
    rig.activity("odd", lambda call: {1, 2})
    job_id = rig.submit({"calls": [{"_tool": "odd", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["failed"]
    assert rig.named(job_id, "call.finished")[0]["error"]["type"] == "InvalidResult"


def test_an_async_handler_over_its_timeout_fails(rig: Rig):
    async def sleepy(call: dict) -> str:
        await asyncio.sleep(5)
        return "late"

    rig.activity("sleepy", sleepy, timeout=0.05)
    job_id = rig.submit({"calls": [{"_tool": "sleepy", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["failed"]
    [event] = rig.named(job_id, "call.finished")
    assert event["error"]["message"] == "timed out after 0.05 s"
    assert rig.store.record(job_id).status is JobStatus.FAILED


def test_the_default_timeout_applies_to_activities_without_one(redis_store: StateStore):
    rig = Rig(redis_store, default_timeout_s=0.05)

    async def sleepy(call: dict) -> str:
        await asyncio.sleep(5)
        return "late"

    rig.activity("sleepy", sleepy)
    job_id = rig.submit({"calls": [{"_tool": "sleepy", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["failed"]
    assert rig.named(job_id, "call.finished")[0]["error"]["message"] == "timed out after 0.05 s"
    rig.executor.leases.stop()


def test_invalid_input_fails_without_running_the_handler(rig: Rig):
    rig.activity("strict", lambda call: call["n"], {"n": {"type": "integer", "minimum": 0}})
    rig.activity("source", lambda call: -1)
    job_id = rig.submit({"calls": [{"_tool": "source", "_outputPath": "†state.n"},
                                   {"_tool": "strict", "n": "†state.n", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["done", "failed"]
    assert rig.runs == {"source": 1}
    assert rig.named(job_id, "call.finished")[1]["error"]["type"] == "CallValidationError"


def test_resolved_calls_are_validated_by_their_tool_s_kept_check(rig: Rig, monkeypatch: pytest.MonkeyPatch):
    """A call that reads the job's state is validated once its references are replaced, by its tool's validator,
    kept per schema: a conforming call takes its compiled check (jsonschema walks none), one that does not fit is
    still worded by jsonschema."""
    from jsonschema import Draft202012Validator

    walked: list[dict] = []
    iter_errors = Draft202012Validator.iter_errors

    def spied(self: Draft202012Validator, instance: object, *args: object) -> object:
        if isinstance(instance, dict) and "_tool" in instance:
            walked.append(instance)
        return iter_errors(self, instance, *args)

    monkeypatch.setattr(Draft202012Validator, "iter_errors", spied)
    rig.activity("source", lambda call: call["n"])
    rig.activity("strict", lambda call: call["n"], {"n": {"type": "integer", "minimum": 0}})
    calls = [{"_tool": "source", "n": 1, "_outputPath": "†state.a"},
             {"_tool": "strict", "n": "†state.a", "_outputPath": "†state.b"},
             {"_tool": "source", "n": -1, "_outputPath": "†state.c"},
             {"_tool": "strict", "n": "†state.c", "_outputPath": "†state.d"}]
    job_id = rig.submit({"calls": calls})
    walked.clear()  # the submission walked the calls that still held references
    assert sorted(rig.drain()) == ["done", "done", "done", "failed"]
    assert [c["n"] for c in walked] == [-1]  # only the call that does not fit its tool
    (failed,) = [e for e in rig.named(job_id, "call.finished") if e["status"] == "failed"]
    assert failed["error"]["type"] == "CallValidationError"
    assert "-1 is less than the minimum of 0" in failed["error"]["message"]
    # one per schema (`source`'s first call is validated too: this process had no copy of its tool to announce it)
    assert len(rig.executor.intake.validators._validators) == 2


def test_calls_of_a_canceled_job_do_not_run(rig: Rig):
    chain(rig)
    job_id = rig.submit(CHAIN)
    assert rig.service.cancel(job_id) is JobStatus.CANCELED
    assert rig.drain() == ["canceled"]
    assert rig.runs == {}
    assert rig.store.call_statuses(job_id) == {rig.call_id(job_id, "first"): CallStatus.CANCELED,
                                               rig.call_id(job_id, "second"): CallStatus.CANCELED}


def test_a_call_that_still_waits_is_not_run(rig: Rig):
    chain(rig)
    job_id = rig.submit(CHAIN)
    assert rig.executor.run_call(job_id, rig.call_id(job_id, "second")).status == "not_ready"
    assert rig.executor.run_call(job_id, "call_nope").status == "missing"
    assert rig.runs == {}


def test_an_activity_this_worker_does_not_serve_is_retried_then_fails(redis_store: StateStore):
    rig = Rig(redis_store)
    rig.activity("elsewhere", lambda call: 1)
    job_id = rig.submit({"calls": [{"_tool": "elsewhere", "_outputPath": "†state.r"}]})
    other = Executor(redis_store, ActivityRegistry(), rig.dispatcher, settings=Settings(lease_s=30.0))
    record = rig.dispatcher.sent[0][1]
    assert other.run_call(job_id, record.id, record=record).status == "failed"  # no spec: no retries
    assert rig.named(job_id, "call.finished")[0]["error"]["type"] == "ActivityNotServed"
    other.leases.stop()
    rig.executor.leases.stop()
