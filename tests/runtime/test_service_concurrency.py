"""The job service and the engine with concurrency keys (docs/tenants.md) on a `StateStore`, a recording dispatcher:
what a waiting job sends (nothing) and what its start sends (its ready calls, its first tick), on every kind of job. No
Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.state import StateStore
from tests.runtime.conftest import Rig, expire_job

pytestmark = pytest.mark.timeout(10)

ONE = {"concurrency": [{"key": "acct-42", "limit": 1}]}


@pytest.fixture
def rig(redis_store: StateStore) -> Iterator[Rig]:
    rig = Rig(redis_store)
    rig.activity("work", lambda call: call["n"], {"n": {"type": "integer"}})
    yield rig
    rig.executor.leases.stop()


def plan(n: int, **options: object) -> dict:
    return {"calls": [{"_tool": "work", "n": n, "_outputPath": "†state.n"}], "options": {**ONE, **options}}


def test_a_waiting_plan_job_sends_nothing_until_the_holder_ends(rig: Rig):
    first, second = rig.submit(plan(1)), rig.submit(plan(2))
    assert rig.store.job_status(first) is JobStatus.QUEUED and rig.store.job_status(second) is JobStatus.WAITING
    assert [job_id for job_id, _ in rig.dispatcher.sent] == [first]
    assert [e["status"] for e in rig.named(second, "job.queued")] == ["waiting"]
    assert rig.drain(limit=1) == ["done"]  # first ends: second is let in and its call sent
    assert rig.store.job_status(first) is JobStatus.SUCCEEDED
    assert [job_id for job_id, _ in rig.dispatcher.sent] == [first, second]
    assert [e["status"] for e in rig.named(second, "job.queued")] == ["waiting", "queued"]
    assert rig.drain() == ["done"] and rig.store.record(second).result == {"n": 2}


def test_a_waiting_agent_job_is_ticked_when_it_starts(rig: Rig):
    holder = rig.submit(plan(1))
    agent = rig.submit({"context": [{"type": "text", "text": "do it"}], "options": ONE})
    assert rig.dispatcher.ticks == [] and rig.store.job_status(agent) is JobStatus.WAITING
    rig.service.cancel(holder)  # a cancel releases too
    assert rig.dispatcher.ticks == [agent] and rig.store.job_status(agent) is JobStatus.QUEUED


def test_an_approval_of_a_waiting_job_is_sent_at_its_start(rig: Rig):
    holder = rig.submit(plan(1))
    held = rig.submit(plan(2, approval=["work"]))
    assert rig.store.job_status(held) is JobStatus.WAITING
    call_id = rig.call_id(held, "work")
    rig.service.approve(held, call_id)
    assert [job_id for job_id, _ in rig.dispatcher.sent] == [holder]  # not sent while its job waits
    assert rig.drain(limit=1) == ["done"]
    assert rig.store.job_status(held) is JobStatus.AWAITING_APPROVAL  # the status it was written for
    assert [(job_id, r.id) for job_id, r in rig.dispatcher.sent][1:] == [(held, call_id)]
    assert rig.drain() == ["done"] and rig.store.job_status(held) is JobStatus.SUCCEEDED


def test_a_job_awaiting_no_call_ends_when_it_starts(rig: Rig):
    holder = rig.submit(plan(1))
    empty = rig.submit({"context": [{"type": "state", "data": {"x": 1}}], "calls": [], "options": ONE})
    assert rig.store.job_status(empty) is JobStatus.WAITING
    assert rig.drain() == ["done"]
    assert rig.store.job_status(holder) is JobStatus.SUCCEEDED and rig.store.job_status(empty) is JobStatus.SUCCEEDED
    after = rig.submit(plan(3))  # and it released its key when it ended
    assert rig.store.job_status(after) is JobStatus.QUEUED


def test_a_canceled_waiting_job_never_sends_and_the_next_one_starts(rig: Rig):
    holder, canceled, third = rig.submit(plan(1)), rig.submit(plan(2)), rig.submit(plan(3))
    assert rig.service.cancel(canceled) is JobStatus.CANCELED
    assert rig.store.call_statuses(canceled) == {rig.call_id(canceled, "work"): CallStatus.CANCELED}
    assert rig.drain(limit=1) == ["done"]
    assert [job_id for job_id, _ in rig.dispatcher.sent] == [holder, third]
    assert rig.drain() == ["done"] and rig.store.job_status(third) is JobStatus.SUCCEEDED


def test_a_job_let_in_that_expired_meanwhile_passes_its_place_on(rig: Rig):
    holder, gone, third = rig.submit(plan(1)), rig.submit(plan(2)), rig.submit(plan(3))
    expire_job(rig.store, gone)  # its keys expired before its place in line did
    assert rig.drain(limit=1) == ["done"]
    assert [job_id for job_id, _ in rig.dispatcher.sent] == [holder, third]
