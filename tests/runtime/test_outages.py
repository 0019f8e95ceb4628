"""Unit tests of store outages and poison calls in the executor, on a `StateStore` (the session's private Redis) behind
a store that fails on demand (`FlakyStore`). The acceptance test with a real state Redis stopped mid-job, a separate
broker and worker processes is tests/integration/test_outages.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from agentq.engine.outages import PatientStore, store_backoff_s
from agentq.errors import StoreUnavailableError
from agentq.protocol.status import JobStatus
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.state import StateStore
from tests.runtime.clock import ManualClock
from tests.runtime.conftest import Rig, expire_now

pytestmark = pytest.mark.timeout(20)

CHAIN = {"context": [{"type": "state", "data": {"x": 1}}],
         "calls": [{"_tool": "first", "x": "†state.x", "_outputPath": "†state.a"},
                   {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"}]}


class FlakyStore:
    """A store whose named steps fail with `StoreUnavailableError`: `fail(step, times, after=False)` makes the
    next `times` calls of `step` fail — before doing anything, or (`after=True`) after the step was done, as
    when the reply is lost."""

    def __init__(self, store: StateStore):
        self.store = store
        self.failures: dict[str, list[bool]] = {}
        self.calls: dict[str, int] = {}

    def fail(self, step: str, times: int, *, after: bool = False) -> None:
        self.failures[step] = [after] * times

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if not callable(attribute):
            return attribute

        def step(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            pending = self.failures.get(name)
            if pending:
                after = pending.pop(0)
                if after:
                    attribute(*args, **kwargs)
                raise StoreUnavailableError(f"cannot reach the state store: {name} failed on purpose")
            return attribute(*args, **kwargs)

        return step


@pytest.fixture
def flaky(redis_store: StateStore) -> FlakyStore:
    return FlakyStore(redis_store)


def make_rig(store: Any, **settings: Any) -> Rig:
    rig = Rig(store, settings=Settings(**{"store_retry_s": 5.0, **settings}))
    rig.activity("first", lambda call: call["x"] + 1, {"x": {"type": "number"}})
    rig.activity("second", lambda call: call["y"] * 2, {"y": {"type": "number"}})
    return rig


@pytest.fixture
def rig(flaky: FlakyStore) -> Iterator[Rig]:
    rig = make_rig(flaky)
    yield rig
    rig.executor.leases.stop()


def outputs(rig: Rig, job_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for message in rig.store.read_log(job_id):
        if message.get("_call"):
            counts[message["_call"]["id"]] = counts.get(message["_call"]["id"], 0) + 1
    return counts


# ----------------------------------------------------------------------------------- PatientStore


class _Failing:
    def __init__(self, failures: int):
        self.failures = failures
        self.tries = 0
        self.url = "redis://example"

    def step(self, job_id: str, value: int) -> int:
        self.tries += 1
        if self.tries <= self.failures:
            raise StoreUnavailableError("down")
        return value * 2


def test_patient_store_retries_a_step_with_growing_waits_until_it_goes_through():
    inner, waits = _Failing(4), []
    patient = PatientStore(inner, 60.0, sleep=waits.append)
    assert patient.step("job_1", 21) == 42
    assert inner.tries == 5 and patient.retried_steps == 1
    assert len(waits) == 4 and all(0 < w <= 5.0 for w in waits)
    assert waits[-1] > waits[0]  # exponential (jitter keeps each within half of its nominal wait)
    assert patient.url == "redis://example" and patient.inner is inner  # attributes pass through


def test_patient_store_gives_up_after_its_window():
    clock = ManualClock(0.0)
    inner = _Failing(1000)
    patient = PatientStore(inner, 3.0, sleep=clock.advance, clock=clock)
    with pytest.raises(StoreUnavailableError):
        patient.step("job_1", 1)
    assert clock() == pytest.approx(3.0)  # it waited out the whole window, not longer
    assert PatientStore(_Failing(1), 0.0, sleep=clock.advance, clock=clock).retried_steps == 0
    with pytest.raises(StoreUnavailableError):  # a window of 0: no retry at all
        PatientStore(_Failing(1), 0.0, sleep=clock.advance, clock=clock).step("job_1", 1)


def test_a_soft_time_limit_during_a_store_step_sends_the_step_again():
    class SoftTimeLimitExceeded(Exception):  # Celery's, by name
        pass

    class Interrupted:
        tries = 0

        def commit(self) -> str:
            self.tries += 1
            if self.tries == 1:
                raise SoftTimeLimitExceeded()
            return "committed"

    inner = Interrupted()
    assert PatientStore(inner, 1.0).commit() == "committed" and inner.tries == 2


def test_store_backoff_grows_to_a_minute():
    assert 0.5 <= store_backoff_s(0) <= 1.0
    assert 4.0 <= store_backoff_s(3) <= 8.0
    assert 30.0 <= store_backoff_s(50) <= 60.0


# ------------------------------------------------------------------------------------ the executor


def test_a_result_is_held_while_its_commit_cannot_reach_the_store(rig: Rig, flaky: FlakyStore):
    job_id = rig.submit(CHAIN)
    flaky.fail("commit", 3)
    assert rig.drain() == ["done", "done"]
    assert rig.runs == {"first": 1, "second": 1}  # the activity did not run again
    assert flaky.calls["commit"] == 5  # 3 failed tries, then first's commit and second's
    assert list(outputs(rig, job_id).values()) == [1, 1]
    assert rig.store.record(job_id).state == {"x": 1, "a": 2, "b": 4}
    patient = rig.executor.store
    assert isinstance(patient, PatientStore) and patient.retried_steps == 1


def test_a_commit_whose_reply_was_lost_is_not_written_twice_and_its_successor_is_sent(rig: Rig, flaky: FlakyStore):
    job_id = rig.submit(CHAIN)
    flaky.fail("commit", 1, after=True)  # the commit happened, its reply never came back
    assert rig.drain() == ["done", "done"]
    assert rig.runs == {"first": 1, "second": 1}
    assert list(outputs(rig, job_id).values()) == [1, 1]
    assert [r.tool for _, r in rig.dispatcher.sent] == ["first", "second"]  # sent by the recovery of the replay
    assert rig.store.job_status(job_id) is JobStatus.SUCCEEDED
    assert [e["event"] for e in rig.events(job_id)].count("call.finished") == 2


def test_a_claim_whose_reply_was_lost_is_the_same_claim(rig: Rig, flaky: FlakyStore):
    job_id = rig.submit(CHAIN)
    flaky.fail("claim", 2, after=True)
    assert rig.drain() == ["done", "done"]
    first = rig.call_id(job_id, "first")
    assert [e["attempt"] for e in rig.named(job_id, "call.started") if e["call_id"] == first] == [1]
    assert rig.store.call_table(job_id).attempts[first] == 1
    assert rig.runs == {"first": 1, "second": 1}


def test_a_failure_released_for_retry_during_an_outage_is_retried(flaky: FlakyStore):
    rig = make_rig(flaky)
    tries = []

    def flaky_activity(call: dict) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("first try fails")
        return "ok"

    rig.activity("again", flaky_activity, retries=2, retry_backoff=0.01)
    job_id = rig.submit({"calls": [{"_tool": "again", "_outputPath": "†state.r"}]})
    flaky.fail("release_for_retry", 1, after=True)
    assert rig.drain() == ["retry", "done"]
    assert rig.store.record(job_id).state == {"r": "ok"}
    assert [e["event"] for e in rig.events(job_id)].count("call.retrying") == 1
    rig.executor.leases.stop()


def test_a_store_unreachable_for_longer_than_the_window_hands_the_task_back(flaky: FlakyStore):
    rig = make_rig(flaky, store_retry_s=0.3)
    job_id = rig.submit(CHAIN)
    flaky.fail("claim", 1000)
    record = rig.dispatcher.sent[0][1]
    with pytest.raises(StoreUnavailableError):
        rig.executor.run_call(job_id, record.id, record=record)
    assert rig.runs == {}
    flaky.failures.clear()  # the store is back: the task's next delivery runs the call
    assert rig.executor.run_call(job_id, record.id, record=record).status == "done"
    rig.executor.leases.stop()


def test_an_emit_during_an_outage_is_retried_and_does_not_fail_the_call(flaky: FlakyStore):
    rig = make_rig(flaky)

    def chatty(call: dict, tool: dict, context: Any) -> str:
        flaky.fail("add_events", 2)
        context.emit({"activity_type": "progress", "content": "half way"})
        return "done"

    rig.activities.register("chatty", chatty)
    rig.tools.register("chatty", {"type": "object", "description": "chatty (test tool)",
                                  "properties": {"_tool": {"type": "string", "const": "chatty"}, "_output": {}}})
    job_id = rig.submit({"calls": [{"_tool": "chatty", "_outputPath": "†state.r"}]})
    assert rig.drain() == ["done"]
    assert rig.store.record(job_id).state == {"r": "done"}
    assert len(rig.named(job_id, "part")) == 1
    rig.executor.leases.stop()


# ------------------------------------------------------------------------------------ poison calls


def test_a_call_whose_process_died_on_each_delivery_fails_at_the_limit(redis_store: StateStore):
    rig = make_rig(redis_store, max_deliveries=2)
    job_id = rig.submit({"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a || †state.failed"},
                                   {"_tool": "second", "y": 2, "_outputPath": "†state.b"}]})
    call_id = rig.call_id(job_id, "first")
    for token in ("died-1", "died-2"):  # two deliveries whose process died while running the call
        assert redis_store.claim(job_id, call_id, token=token, lease_ms=1000).outcome == "claimed"
        expire_now(redis_store, redis_store.keys(job_id).lease(call_id))
    outcome = rig.executor.run_call(job_id, call_id)
    assert outcome.status == "failed"
    assert rig.runs["first"] == 0  # the third delivery did not run it
    finished = [e for e in rig.named(job_id, "call.finished") if e["call_id"] == call_id]
    assert [(e["status"], e["error"]["type"]) for e in finished] == [("failed", "DeliveryLimitExceeded")]
    assert "delivered 2 times" in finished[0]["error"]["message"]
    assert "AGENTQ_MAX_DELIVERIES=2" in finished[0]["error"]["message"]
    assert rig.store.record(job_id).state["failed"]["error"]["type"] == "DeliveryLimitExceeded"  # the || branch
    rig.executor.leases.stop()


def test_lost_deliveries_under_the_limit_and_retries_after_errors_do_not_count(redis_store: StateStore):
    rig = make_rig(redis_store, max_deliveries=2)
    job_id = rig.submit({"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]})
    call_id = rig.call_id(job_id, "first")
    assert redis_store.claim(job_id, call_id, token="died", lease_ms=1000).outcome == "claimed"
    expire_now(redis_store, redis_store.keys(job_id).lease(call_id))
    assert rig.executor.run_call(job_id, call_id).status == "done"  # one lost delivery: under the limit
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
    rig.executor.leases.stop()


def test_no_delivery_limit_with_zero(redis_store: StateStore):
    rig = make_rig(redis_store, max_deliveries=0)
    job_id = rig.submit({"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]})
    call_id = rig.call_id(job_id, "first")
    for n in range(6):
        redis_store.claim(job_id, call_id, token=f"died-{n}", lease_ms=1000)
        expire_now(redis_store, redis_store.keys(job_id).lease(call_id))
    assert rig.executor.run_call(job_id, call_id).status == "done"
    rig.executor.leases.stop()


def test_a_patient_step_is_wrapped_once_and_again_when_the_store_changes_it(monkeypatch: pytest.MonkeyPatch):
    """A worker takes a few store steps per call: each step's retrying wrapper is made on its first use only
    (`functools.wraps` once, not on every call), and made again for a step the store replaced."""
    import functools

    class Steps:
        def claim(self, n: int) -> str:
            return f"claimed {n}"

    made: list[str] = []
    wraps = functools.wraps

    def counted_wraps(wrapped: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(wrapped.__name__)
        return wraps(wrapped, *args, **kwargs)

    monkeypatch.setattr(functools, "wraps", counted_wraps)
    inner = Steps()
    patient = PatientStore(cast(Store, inner), 1.0)  # a stand-in with the one step this test takes
    assert [patient.claim(n) for n in range(5)] == [f"claimed {n}" for n in range(5)]
    assert made == ["claim"] and patient.claim is patient.claim
    inner.claim = lambda n: f"replaced {n}"  # type: ignore[method-assign]
    assert patient.claim(7) == "replaced 7" and made == ["claim", "<lambda>"]
