"""The store contract of resuming a job (resume.lua, docs/resume.md), the same on the session's private Redis and on a
Redis Cluster: failed and canceled calls go back to ready or pending (a call that waits on one that runs again waits
again), committed ones stay, the ended run is kept, the end signal cleared, and a job that is not failed nor canceled
is left exactly as it was."""

from __future__ import annotations

import pytest

from agentq.protocol.envelopes import JobResumed
from agentq.protocol.records import JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.resume_contract import ResumeConflict, Resumed, ResumeMissing
from tests.runtime.conftest import Backend
from tests.runtime.test_store_contract import LEASE_MS, events, job_finished, message, submit


def resumed_event(job_id: str) -> JobResumed:
    return JobResumed(job_id=job_id, status="running", previous={"status": "failed", "error": None})


def resume(store, job_id: str, **kwargs):
    options = {"expire_at_ms": int((store.clock() + 3600) * 1000), "waiting": False, "options": None, "note": None}
    return store.resume_job(job_id, event=resumed_event(job_id), **{**options, **kwargs})


def test_a_failed_call_runs_again_and_what_waits_on_it_waits_again(backend: Backend):
    store = backend.store
    plan, ids = submit(store)  # first -> second; bg (fire and forget)
    for tool, status in (("bg", CallStatus.DONE), ("first", CallStatus.FAILED)):
        store.claim(plan.id, ids[tool], token="t", lease_ms=LEASE_MS)
        store.commit(plan.id, ids[tool], token="t", status=status)
    store.claim(plan.id, ids["second"], token="s", lease_ms=LEASE_MS)  # released by the failure: it ran and failed
    store.commit(plan.id, ids["second"], token="s", status=CallStatus.FAILED)
    error = {"type": "CallsFailed", "message": "2 call(s) failed"}
    saved = JobRecord.from_dict({"id": plan.id, "status": "failed", "error": error})
    assert store.finalize(plan.id, record=saved, event=job_finished(plan.id, JobStatus.FAILED))
    assert store.wait_finished(plan.id, 1.0) is JobStatus.FAILED

    reply = resume(store, plan.id, options={"ttl_s": 3600, "budget": {"max_requests": 9}})
    assert isinstance(reply, Resumed)
    assert (reply.run, reply.status, reply.open_calls) == (2, JobStatus.RUNNING, 2)
    assert [(r.id, r.run) for r in reply.ready] == [(ids["first"], 2)]
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.READY, ids["second"]: CallStatus.PENDING,
                                            ids["bg"]: CallStatus.DONE}
    assert store.call_records(plan.id, [ids["second"]])[ids["second"]].run == 2
    info = store.job_info(plan.id)
    assert (info.status, info.record, info.finished_at) == (JobStatus.RUNNING, None, None)
    assert info.options == {"ttl_s": 3600, "budget": {"max_requests": 9}}
    [run] = info.runs
    assert (run["run"], run["status"], run["error"]) == (1, "failed", error) and run["finished_at"]
    assert store.wait_finished(plan.id, 0.05) is None  # its waiters wait for the new end
    assert events(store, plan.id)[-2:] == ["job.finished", "job.resumed"]
    assert [e for _, e in store.read_events(plan.id)][-1]["run"] == 2
    record = store.record(plan.id).to_dict()
    assert [r["status"] for r in record["runs"]] == ["failed", "running"]

    # the first call runs again, commits, and releases the second once more: both run in run 2
    store.claim(plan.id, ids["first"], token="a2", lease_ms=LEASE_MS)
    commit = store.commit(plan.id, ids["first"], token="a2", status=CallStatus.DONE,
                          messages=[message(ids["first"], 3)])
    assert [r.id for r in commit.released] == [ids["second"]] and commit.open_calls == 1
    assert isinstance(resume(store, plan.id), ResumeConflict)  # running: nothing written
    assert events(store, plan.id).count("job.resumed") == 1


def test_a_canceled_job_resumes_its_canceled_calls_and_a_running_one_keeps_running(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    reply = resume(store, plan.id)
    assert isinstance(reply, Resumed) and reply.open_calls == 2
    assert [r.id for r in reply.ready] == [ids["bg"]]
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.RUNNING, ids["second"]: CallStatus.PENDING,
                                            ids["bg"]: CallStatus.READY}
    # the call running at the cancel commits in the resumed run: not late, and it releases the second
    commit = store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE,
                          messages=[message(ids["first"], 2)])
    assert commit.job_status is JobStatus.RUNNING and [r.id for r in commit.released] == [ids["second"]]
    assert "_afterCancel" not in store.read_log(plan.id)[-1]


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, None])
def test_a_job_that_succeeded_or_runs_is_not_resumed_and_nothing_is_written(backend: Backend, status):
    store = backend.store
    plan, _ = submit(store)
    if status is not None:
        store.finalize(plan.id, record=JobRecord(id=plan.id, status=status),
                       event=job_finished(plan.id, status))
    before = (store.call_statuses(plan.id), store.job_info(plan.id), events(store, plan.id))
    assert resume(store, plan.id) == ResumeConflict(status or JobStatus.QUEUED)
    assert (store.call_statuses(plan.id), store.job_info(plan.id), events(store, plan.id)) == before
    assert resume(store, "job_never") == ResumeMissing()
