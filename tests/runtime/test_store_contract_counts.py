"""The metrics' count of a job's end (`JobCounts`, store/stats.py), the same contract on Redis and a Redis Cluster:
the step that ends a job on the hot path (finalize, or the commit of its last awaited call writing the end its
claim let the worker build) takes it out of the active, approvals and tenant's active sets and counts it once under
its final status and tenant, however often the step is run again. On one Redis that step writes the count itself;
on a cluster it follows the step (other hash slots)."""

from __future__ import annotations

from agentq.engine.finalize import end_ahead
from agentq.protocol.envelopes import CallFinished, JobFinished, JobQueued, JobStarted
from agentq.protocol.records import JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.replies import Claimed, CommitDuplicate, Committed
from tests.runtime.conftest import Backend, make_plan, records_of, tool_schema

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}})}
ONE = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}
TENANT = "acme"


def submitted(backend: Backend, job_id: str) -> str:
    """A one-call job of TENANT, in every set its end leaves (the approvals set as if a step may have held a call
    of it, its tenant's active set as its admission writes it); its call's id."""
    store = backend.store
    plan = make_plan(ONE, TOOLS, job_id=job_id)
    assert store.create_job(plan, records_of(plan), submitted=ONE, tenant=TENANT,
                            events=[JobQueued(job_id=job_id, kind="plan", calls=1)])
    store.counts.may_hold_approvals(job_id)
    store.redis.zadd(store.fleet.tenant_active(TENANT), {job_id: 4_000_000_000})
    assert held_by(backend, job_id) == [True, True, True]
    return plan.calls[0].id


def held_by(backend: Backend, job_id: str) -> list[bool]:
    """Whether the active, approvals and tenant's active sets hold the job."""
    store = backend.store
    return [store.redis.zscore(key, job_id) is not None
            for key in (store.fleet.active_jobs, store.fleet.approval_jobs, store.fleet.tenant_active(TENANT))]


def totals(backend: Backend) -> dict[str, int]:
    return {field: int(n) for field, n in backend.store.redis.hgetall(backend.store.fleet.job_totals).items()}


def commit(backend: Backend, job_id: str, call_id: str, claimed: Claimed) -> Committed:
    """Commit the call's outcome, with the job's end built from its claim when the claim sent what it reads."""
    messages = [{"type": "state", "data": {"a": 1}, "_call": {"id": call_id}}]
    planned = end_ahead(job_id, claimed.last, call_id, messages, source="agentq") if claimed.last else None
    committed = backend.store.commit(
        job_id, call_id, token="t", status=CallStatus.DONE, messages=messages, awaited=True,
        events=[CallFinished(job_id=job_id, call_id=call_id, tool="first", status="done", duration_ms=1.0)],
        ahead=planned.end if planned else None)
    assert isinstance(committed, Committed)
    return committed


def claim(backend: Backend, job_id: str, call_id: str) -> Claimed:
    claimed = backend.store.claim(job_id, call_id, token="t", lease_ms=60_000, job_started=JobStarted(job_id=job_id),
                                  last_call=True)
    assert isinstance(claimed, Claimed) and claimed.last is not None
    return claimed


def finalize(backend: Backend, job_id: str, status: JobStatus = JobStatus.SUCCEEDED) -> bool:
    record = JobRecord(id=job_id, status=status, tenant=TENANT)
    return backend.store.finalize(job_id, record=record, event=JobFinished(job_id=job_id, status=status.value))


def test_finalize_counts_the_jobs_end_once(backend: Backend):
    call_id = submitted(backend, "job_final")
    claimed = backend.store.claim("job_final", call_id, token="t", lease_ms=60_000)
    assert isinstance(claimed, Claimed)
    assert not commit(backend, "job_final", call_id, claimed).finalized  # no end built: finalize ends the job
    assert held_by(backend, "job_final") == [True, True, True] and totals(backend) == {}
    assert finalize(backend, "job_final", JobStatus.FAILED)
    assert held_by(backend, "job_final") == [False, False, False]
    assert totals(backend) == {"failed": 1, f"failed:{TENANT}": 1}
    # run again (a redelivered task's recovery): the job had ended, nothing is written or counted
    assert not finalize(backend, "job_final")
    assert not finalize(backend, "job_final", JobStatus.FAILED)
    assert totals(backend) == {"failed": 1, f"failed:{TENANT}": 1}
    assert backend.store.job_status("job_final") is JobStatus.FAILED


def test_the_commit_that_ends_the_job_counts_its_end_once(backend: Backend):
    call_id = submitted(backend, "job_ahead")
    committed = commit(backend, "job_ahead", call_id, claim(backend, "job_ahead", call_id))
    assert committed.finalized and backend.store.job_status("job_ahead") is JobStatus.SUCCEEDED
    assert held_by(backend, "job_ahead") == [False, False, False]
    assert totals(backend) == {"succeeded": 1, f"succeeded:{TENANT}": 1}
    # the commit redelivered is a duplicate, the progress step's finalize finds the job ended: neither counts
    replayed = backend.store.commit("job_ahead", call_id, token="t", status=CallStatus.DONE, awaited=True)
    assert isinstance(replayed, CommitDuplicate)
    assert not finalize(backend, "job_ahead")
    assert totals(backend) == {"succeeded": 1, f"succeeded:{TENANT}": 1}


def test_a_commit_given_an_end_it_does_not_write_counts_nothing(backend: Backend):
    """The job changed since the claim (here its log): the commit leaves the end to finalize, and so its count."""
    call_id = submitted(backend, "job_moved")
    claimed = claim(backend, "job_moved", call_id)
    backend.store.redis.rpush(backend.store.keys("job_moved").log, '{"type": "state", "data": {"z": 1}}')
    assert not commit(backend, "job_moved", call_id, claimed).finalized
    assert held_by(backend, "job_moved") == [True, True, True] and totals(backend) == {}
    assert finalize(backend, "job_moved")
    assert held_by(backend, "job_moved") == [False, False, False]
    assert totals(backend) == {"succeeded": 1, f"succeeded:{TENANT}": 1}
