"""The store contract of waits (docs/waits.md): a wait opened, decided once, woken by an event or a kept signal, its
timer taken by one dispatcher at a time and taken again once its claim runs out; on the session's private Redis and
on a Redis Cluster (each step stays in its job's slot, the timers and event index in their own)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentq.protocol.envelopes import CallWaiting
from agentq.protocol.plans import JobPlan
from agentq.protocol.status import CallStatus
from agentq.protocol.waits import FOREVER, WAIT_TOOLS, WaitSpec, received, wait_spec
from agentq.store.replies import Committed
from agentq.store.state import StateStore
from tests.runtime.conftest import make_plan, records_of

LEASE_MS = 30_000


@pytest.fixture(params=["redis", "cluster"])
def store(request: pytest.FixtureRequest) -> Iterator[StateStore]:
    if request.param == "cluster":
        cluster = request.getfixturevalue("local_cluster")
        cluster.flush()
        state = StateStore(cluster.url, cluster=True)
    else:
        state = StateStore(request.getfixturevalue("redis_url"))
        state.redis.flushdb()
    try:
        yield state
    finally:
        state.close()


def _running(store: StateStore, call: dict) -> tuple[JobPlan, str, str]:
    """A job whose one call (a wait) is claimed: (plan, call id, the attempt's token)."""
    plan = make_plan({"tools": [call["_tool"]], "calls": [call]}, dict(WAIT_TOOLS))
    assert store.create_job(plan, records_of(plan), submitted={}, events=[])
    call_id = plan.calls[0].id
    claim = store.claim(plan.id, call_id, token="tok", lease_ms=LEASE_MS)
    assert claim.outcome.value == "claimed"
    return plan, call_id, "tok"


def _open(store: StateStore, plan: JobPlan, call_id: str, spec: WaitSpec) -> str:
    event = CallWaiting(job_id=plan.id, call_id=call_id, tool=spec.kind, awaits=spec.awaited(), until=spec.until)
    return store.open_wait(plan.id, call_id, token="tok", spec=spec, opened_ms=1, tenant="default", event=event)


def test_a_kept_signal_is_taken_in_order_by_the_wait_that_opens(store: StateStore):
    plan, call_id, _ = _running(store, {"_tool": "waitForSignal", "name": "go", "_outputPath": "†state.go"})
    assert store.send_signal(plan.id, "go", received("go", 1, "s1", "t")) == ("kept", None)
    assert store.send_signal(plan.id, "go", received("go", 2, "s2", "t")) == ("kept", None)
    assert _open(store, plan, call_id, wait_spec({"_tool": "waitForSignal", "name": "go"}, time.time())) == "woken"
    assert store.call_statuses(plan.id)[call_id] is CallStatus.WAITING
    taken = store.take_wait(plan.id, call_id, now_ms=0, sleep_output={})
    assert taken.outcome == "woken" and taken.ended == {"output": received("go", 1, "s1", "t")}  # the oldest
    assert store.take_wait(plan.id, call_id, now_ms=0, sleep_output={}).ended == taken.ended  # decided once
    commit = store.commit(plan.id, call_id, token=taken.token, status=CallStatus.DONE)
    assert isinstance(commit, Committed)
    assert store.take_wait(plan.id, call_id, now_ms=0, sleep_output={}).outcome == "gone"
    assert store.redis.lrange(store.keys(plan.id).signals("go"), 0, -1) != []  # the second is kept for a next wait


def test_a_due_wait_is_decided_once_and_nothing_delivered_later_replaces_it(store: StateStore):
    plan, call_id, _ = _running(store, {"_tool": "waitForEvent", "event": "e", "match": {"/k": 1}, "timeout_s": 5})
    spec = wait_spec({"_tool": "waitForEvent", "event": "e", "match": {"/k": 1}, "timeout_s": 5}, 1000.0)
    # claimed, its wait not open yet: a timer taken now must be kept, not dropped
    assert store.take_wait(plan.id, call_id, now_ms=1_005_000, sleep_output={}).outcome == "opening"
    assert _open(store, plan, call_id, spec) == "open"
    assert store.take_wait(plan.id, call_id, now_ms=1_004_000, sleep_output={}).outcome == "early"
    assert store.take_wait(plan.id, call_id, now_ms=1_005_000, sleep_output={}).ended == {"timeout": True}
    assert store.wake_wait(plan.id, call_id, event_name="e", event=received("e", {"k": 1}, "x", "t")) is False
    assert store.event_waiters("default", "e", {"k": 1}) != []  # the index entry stays until the wait is closed
    store.close_wait(plan.id, call_id, tenant="default", spec=spec)
    assert store.event_waiters("default", "e", {"k": 1}) == []


def test_an_event_finds_the_waits_its_data_matches_by_their_pointers_and_values(store: StateStore):
    plan, call_id, _ = _running(store, {"_tool": "waitForEvent", "event": "paid", "match": {"/o/id": "a", "/n": 2}})
    spec = wait_spec({"_tool": "waitForEvent", "event": "paid", "match": {"/o/id": "a", "/n": 2}}, time.time())
    assert spec.due_ms == FOREVER
    _open(store, plan, call_id, spec)
    member = f"{plan.id} {call_id}"
    assert [m for _, m in store.event_waiters("default", "paid", {"o": {"id": "a"}, "n": 2, "x": 0})] == [member]
    for miss in ({"o": {"id": "a"}, "n": 3}, {"o": {"id": "a"}}, {"o": {"id": "a"}, "n": True}, {"n": 2}):
        assert store.event_waiters("default", "paid", miss) == [], miss
    assert store.event_waiters("other", "paid", {"o": {"id": "a"}, "n": 2}) == []  # another tenant's
    assert store.wake_wait(plan.id, call_id, event_name="paid", event=received("paid", {}, "e1", "t")) is True
    score = store.redis.zscore(store.fleet.timers, member)
    assert score == 0  # brought due now


def test_a_taken_timer_is_claimed_then_taken_again_when_its_claim_runs_out(store: StateStore):
    plan, call_id, _ = _running(store, {"_tool": "sleep", "seconds": 0})
    _open(store, plan, call_id, wait_spec({"_tool": "sleep", "seconds": 0}, time.time() - 1))
    now = round(time.time() * 1000)
    assert store.take_due_timers(now_ms=now, limit=10, claim_ms=200) == [(plan.id, call_id)]
    assert store.take_due_timers(now_ms=now, limit=10, claim_ms=200) == []  # claimed by the first taker
    assert store.take_due_timers(now_ms=now + 300, limit=10, claim_ms=200) == [(plan.id, call_id)]
