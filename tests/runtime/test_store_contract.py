"""The store contract: the same assertions against `StateStore` on the session's private Redis and on a Redis
Cluster.

Every edge of the atomic steps (submit, claim, commit, retry, renew, finalize, cancel, rejection here; approvals,
settle, agent ticks and module links in test_store_contract_steps.py) behaves the same on both: a job's keys share
one hash slot, and each step's script runs where they live.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

import pytest

from agentq.errors import InvalidJobIdError, JobExpiredError, JobNotFoundError
from agentq.protocol.digests import dumps, record_digest
from agentq.protocol.envelopes import CallFinished, CallRetrying, CallStarted, JobFinished, JobQueued, JobStarted
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import ErrorInfo, JobRecord, WorkerAnnouncement
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.fleet import RedisFleet
from agentq.store.replies import ClaimOutcome, CommitOutcome
from agentq.store.sync_reads import iter_events
from tests.runtime.conftest import Backend, make_plan, records_of, tool_schema

LEASE_MS = 60_000
SHORT_LEASE_MS = 40  # for the tests where a lease expires: Redis really waits for it

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}}),
         "second": tool_schema("second", {"y": {"type": "number"}}),
         "bg": tool_schema("bg")}
CHAIN = {"context": [{"type": "state", "data": {"x": 1}}, {"type": "text", "text": "n"}],
         "calls": [{"_tool": "first", "x": "†state.x", "_outputPath": "†state.a"},
                   {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"},
                   {"_tool": "bg"}]}


def submit(store, job: dict = CHAIN, job_id: str | None = None) -> tuple[JobPlan, dict[str, str]]:
    plan = make_plan(job, TOOLS, job_id=job_id)
    queued = JobQueued(job_id=plan.id, kind=plan.kind.value, calls=len(plan.calls))
    assert store.create_job(plan, records_of(plan), submitted=job, events=[queued])
    return plan, {c.tool: c.id for c in plan.calls}


def events(store, job_id: str) -> list[str]:
    return [e["event"] for _, e in store.read_events(job_id)]


def message(call_id: str, value: object) -> dict:
    return {"type": "state", "data": {"a": value}, "_call": {"id": call_id}}


def finished(job_id: str, call_id: str, status: CallStatus = CallStatus.DONE) -> CallFinished:
    return CallFinished(job_id=job_id, call_id=call_id, tool="t", status=status.value, duration_ms=1.0)


def job_finished(job_id: str, status: JobStatus) -> JobFinished:
    return JobFinished(job_id=job_id, status=status.value)


# ------------------------------------------------------------------------------------- submission


def test_submit_writes_the_whole_job_once(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    info = store.job_info(plan.id)
    assert (info.status, info.open_calls, info.kind) == (JobStatus.QUEUED, 2, plan.kind)
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.READY, ids["second"]: CallStatus.PENDING,
                                            ids["bg"]: CallStatus.READY}
    assert store.call_statuses(plan.id, [ids["second"], "call_unknown"]) == {ids["second"]: CallStatus.PENDING}
    assert store.call_statuses(plan.id, []) == {}
    assert store.read_log(plan.id) == plan.context
    assert store.read_log(plan.id, 1) == plan.context[1:]
    assert store.dependents(plan.id, ids["first"]) == [ids["second"]]
    assert store.dependents(plan.id, ids["second"]) == []
    assert store.call_records(plan.id) == {r.id: r for r in records_of(plan)}
    assert list(store.call_records(plan.id, [ids["bg"], "call_nope"])) == [ids["bg"]]
    assert events(store, plan.id) == ["job.queued"]
    # the same id again: nothing written
    again = make_plan({"calls": [{"_tool": "bg"}]}, TOOLS, job_id=plan.id)
    assert not store.create_job(again, records_of(again), submitted={}, events=[
        JobQueued(job_id=plan.id, kind="plan", calls=1)])
    assert len(store.call_statuses(plan.id)) == 3 and events(store, plan.id) == ["job.queued"]
    assert store.job_info(plan.id).open_calls == 2
    assert store.recent_jobs() == [plan.id]  # listed once


def test_recent_jobs_lists_new_jobs_first(backend: Backend):
    store = backend.store
    submit(store, job_id="job_first")
    backend.advance(0.01)
    submit(store, job_id="job_second")
    assert store.recent_jobs() == ["job_second", "job_first"]
    assert store.recent_jobs(limit=1) == ["job_second"]


def test_unknown_and_invalid_job_ids(backend: Backend):
    store = backend.store
    with pytest.raises(JobNotFoundError):
        store.job_info("job_nope")
    with pytest.raises(JobNotFoundError):
        store.job_status("job_nope")
    with pytest.raises(JobNotFoundError):
        store.cancel("job_nope", event=job_finished("job_nope", JobStatus.CANCELED))
    with pytest.raises(InvalidJobIdError):
        store.job_info("bad {id}")
    with pytest.raises(InvalidJobIdError):
        store.claim("bad id", "c", token="t", lease_ms=LEASE_MS)
    assert store.claim("job_nope", "c", token="t", lease_ms=LEASE_MS).outcome is ClaimOutcome.MISSING
    assert store.wait_finished("job_nope", 0.01) is None


def test_a_job_whose_data_expired_is_told_apart_from_one_never_submitted(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    assert type(store.missing("job_never")) is JobNotFoundError
    store.redis.delete(*store.keys(plan.id).all)  # what its TTL does; the fleet's listing keeps its id
    with pytest.raises(JobNotFoundError):
        store.job_info(plan.id)
    expired = store.missing(plan.id)
    assert isinstance(expired, JobExpiredError) and plan.id in str(expired)


def test_a_jobs_trace_context_is_stored_once_and_never_for_a_job_that_does_not_exist(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    first, second = f"00-{'1' * 32}-{'2' * 16}-01", f"00-{'3' * 32}-{'4' * 16}-01"
    assert store.job_info(plan.id).traceparent is None
    assert store.adopt_traceparent(plan.id, first) == first
    assert store.adopt_traceparent(plan.id, second) == first  # the second process to come reads the first's
    assert store.job_info(plan.id).traceparent == first
    assert store.adopt_traceparent("job_nope", second) is None
    with pytest.raises(JobNotFoundError):  # nothing was written for it
        store.job_info("job_nope")


# ------------------------------------------------------------------------------------------ claim


def test_claim_outcomes_attempts_and_job_start(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    assert store.claim(plan.id, "call_nope", token="t", lease_ms=LEASE_MS).outcome is ClaimOutcome.MISSING
    pending = store.claim(plan.id, ids["second"], token="t", lease_ms=LEASE_MS)
    assert (pending.outcome, pending.status) == (ClaimOutcome.NOT_READY, CallStatus.PENDING)
    assert store.job_status(plan.id) is JobStatus.QUEUED  # a refused claim starts nothing
    started = JobStarted(job_id=plan.id)
    claim = store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS, job_started=started)
    assert (claim.outcome, claim.attempt, claim.announced, claim.record_replaced) == (
        ClaimOutcome.CLAIMED, 1, False, False)
    assert claim.record == records_of(plan)[0]  # no record carried: the stored one
    assert claim.tool == plan.tools["first"]
    assert claim.tool_sha == hashlib.sha1(dumps(plan.tools["first"]).encode()).hexdigest()
    assert claim.log_length is None and claim.log_tail == []  # no offset: neither the log's length nor a tail
    info = store.job_info(plan.id)
    assert info.status is JobStatus.RUNNING and info.started_at
    assert store.call_statuses(plan.id)[ids["first"]] is CallStatus.RUNNING
    leased = store.claim(plan.id, ids["first"], token="b", lease_ms=LEASE_MS)
    assert leased.outcome is ClaimOutcome.LEASED and 0 < leased.lease_left_ms <= LEASE_MS
    # the second call to start does not publish job.started again
    store.claim(plan.id, ids["bg"], token="c", lease_ms=LEASE_MS, job_started=started)
    assert events(store, plan.id) == ["job.queued", "job.started"]


def test_a_claim_that_takes_the_job_for_started_writes_nothing_when_it_is_not(backend: Backend):
    """A worker renders job.started about once per job: later claims say they take the job for started. If it
    is not (a job id used again), the claim writes nothing and says so; claimed again with the event, it runs."""
    store = backend.store
    plan, ids = submit(store)
    refused = store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS, expect_started=True)
    assert refused.outcome is ClaimOutcome.UNSTARTED
    assert store.call_statuses(plan.id)[ids["first"]] is CallStatus.READY
    assert store.job_status(plan.id) is JobStatus.QUEUED and events(store, plan.id) == ["job.queued"]
    claim = store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS, job_started=JobStarted(job_id=plan.id))
    assert (claim.outcome, claim.attempt) == (ClaimOutcome.CLAIMED, 1)
    later = store.claim(plan.id, ids["bg"], token="b", lease_ms=LEASE_MS, expect_started=True)
    assert (later.outcome, later.attempt) == (ClaimOutcome.CLAIMED, 1)
    assert events(store, plan.id) == ["job.queued", "job.started"]


def test_claim_sends_the_log_tail_from_the_offset(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    whole = store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS, log_offset=0)
    assert whole.log_tail == plan.context and whole.log_length == 2
    tail = store.claim(plan.id, ids["bg"], token="b", lease_ms=LEASE_MS, log_offset=1)
    assert tail.log_tail == plan.context[1:]
    store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE, messages=[message(ids["first"], 2)])
    later = store.claim(plan.id, ids["second"], token="c", lease_ms=LEASE_MS, log_offset=2)
    assert (later.log_length, later.log_tail) == (3, [message(ids["first"], 2)])
    past = store.claim(plan.id, ids["second"], token="d", lease_ms=LEASE_MS, log_offset=99)
    assert past.outcome is ClaimOutcome.LEASED


def test_claim_runs_the_stored_record_and_publishes_start_events_only_when_current(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    stored = {r.id: r for r in records_of(plan)}
    tool_sha = hashlib.sha1(dumps(plan.tools["first"]).encode()).hexdigest()
    first = stored[ids["first"]]
    start = [CallStarted(job_id=plan.id, call_id=first.id, tool="first", attempt=1)]
    claim = store.claim(plan.id, first.id, token="a", lease_ms=LEASE_MS, record=first,
                        record_sha=record_digest(first), tool_sha=tool_sha, start_events=start)
    assert (claim.record, claim.record_replaced, claim.tool, claim.tool_sha, claim.announced) == (
        first, False, None, "", True)
    assert events(store, plan.id) == ["job.queued", "call.started"]

    # a forged record (another activity and output path): the stored one comes back and runs; a stale tool copy
    # gets the stored schema; the caller's start events are not published
    bg = stored[ids["bg"]]
    forged = type(bg).from_dict({**bg.to_dict(), "activity": "first",
                                 "call": {**bg.call, "_outputPath": "†state.evil"}})
    claim = store.claim(plan.id, bg.id, token="b", lease_ms=LEASE_MS, record=forged,
                        record_sha=record_digest(forged), tool_sha="0" * 40,
                        start_events=[CallStarted(job_id=plan.id, call_id=bg.id, tool="bg", attempt=1)])
    assert (claim.record, claim.record_replaced, claim.announced) == (bg, True, False)
    assert claim.tool == plan.tools["bg"]
    assert events(store, plan.id) == ["job.queued", "call.started"]


def test_start_events_are_not_published_by_a_later_attempt(backend: Backend):
    store = backend.store
    plan, _ = submit(store)
    first = records_of(plan)[0]
    tool_sha = hashlib.sha1(dumps(plan.tools["first"]).encode()).hexdigest()
    store.claim(plan.id, first.id, token="a", lease_ms=LEASE_MS)
    assert store.release_for_retry(plan.id, first.id, token="a")
    start = [CallStarted(job_id=plan.id, call_id=first.id, tool="first", attempt=2)]
    claim = store.claim(plan.id, first.id, token="b", lease_ms=LEASE_MS, record=first,
                        record_sha=record_digest(first), tool_sha=tool_sha, start_events=start)
    assert (claim.attempt, claim.announced, claim.record_replaced) == (2, False, False)
    assert "call.started" not in events(store, plan.id)


def test_an_expired_lease_is_taken_over(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="dead", lease_ms=SHORT_LEASE_MS)
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    takeover = store.claim(plan.id, ids["first"], token="alive", lease_ms=LEASE_MS)
    assert (takeover.outcome, takeover.attempt, takeover.lost) == (ClaimOutcome.CLAIMED, 2, 1)
    # the dead attempt can neither commit nor retry nor renew any more
    assert store.commit(plan.id, ids["first"], token="dead", status=CallStatus.DONE,
                        messages=[message(ids["first"], "dead")]).outcome is CommitOutcome.SUPERSEDED
    assert not store.release_for_retry(plan.id, ids["first"], token="dead")
    assert store.renew_leases(plan.id, {ids["first"]: "dead"}, LEASE_MS) == 0
    commit = store.commit(plan.id, ids["first"], token="alive", status=CallStatus.DONE,
                          messages=[message(ids["first"], "alive")])
    assert commit.outcome is CommitOutcome.COMMITTED
    assert store.read_log(plan.id)[2:] == [message(ids["first"], "alive")]


def test_lost_attempts_are_counted_per_call_by_takeovers_only(backend: Backend):
    """A takeover (the previous attempt's lease expired: its process died) counts one lost attempt; a claim of
    a ready call, also after a released retry, counts none."""
    store = backend.store
    plan, ids = submit(store)
    first = store.claim(plan.id, ids["first"], token="t1", lease_ms=SHORT_LEASE_MS)
    assert (first.attempt, first.lost) == (1, 0)
    for n in (1, 2):
        backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
        claim = store.claim(plan.id, ids["first"], token=f"t{n + 1}", lease_ms=SHORT_LEASE_MS)
        assert (claim.outcome, claim.attempt, claim.lost) == (ClaimOutcome.CLAIMED, n + 1, n)
    assert store.release_for_retry(plan.id, ids["first"], token="t3")
    again = store.claim(plan.id, ids["first"], token="t4", lease_ms=LEASE_MS)
    assert (again.attempt, again.lost) == (4, 2)
    other = store.claim(plan.id, ids["bg"], token="u", lease_ms=LEASE_MS)
    assert (other.attempt, other.lost) == (1, 0)


def test_a_claim_replayed_with_its_own_token_is_the_same_claim(backend: Backend):
    """A claim whose reply was lost (store outage) is sent again with the same token: the same attempt, no lost
    attempt, its start events and the job's start not published twice."""
    store = backend.store
    plan, _ = submit(store)
    first = records_of(plan)[0]
    tool_sha = hashlib.sha1(dumps(plan.tools["first"]).encode()).hexdigest()
    start = [CallStarted(job_id=plan.id, call_id=first.id, tool="first", attempt=1)]
    kwargs = dict(token="a", lease_ms=LEASE_MS, job_started=JobStarted(job_id=plan.id), record=first,
                  record_sha=record_digest(first), tool_sha=tool_sha, start_events=start, log_offset=0)
    claim = store.claim(plan.id, first.id, **kwargs)
    replay = store.claim(plan.id, first.id, **kwargs)
    assert (replay.outcome, replay.attempt, replay.lost, replay.announced) == (ClaimOutcome.CLAIMED, 1, 0, True)
    assert (replay.record, replay.log_length, replay.log_tail) == (claim.record, claim.log_length, claim.log_tail)
    assert events(store, plan.id) == ["job.queued", "job.started", "call.started"]
    assert store.claim(plan.id, first.id, token="b", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    assert store.commit(plan.id, first.id, token="a", status=CallStatus.DONE).outcome is CommitOutcome.COMMITTED


def test_an_attempt_whose_lease_lapsed_without_a_takeover_still_commits(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="slow", lease_ms=SHORT_LEASE_MS)
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    assert store.commit(plan.id, ids["first"], token="slow", status=CallStatus.DONE).outcome is (
        CommitOutcome.COMMITTED)


def test_renew_extends_only_the_holders_lease(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=SHORT_LEASE_MS)
    store.claim(plan.id, ids["bg"], token="b", lease_ms=SHORT_LEASE_MS)
    assert store.renew_leases(plan.id, {ids["first"]: "a", ids["bg"]: "wrong", ids["second"]: "x"},
                              LEASE_MS) == 1
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    assert store.claim(plan.id, ids["first"], token="c", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    assert store.claim(plan.id, ids["bg"], token="c", lease_ms=LEASE_MS).outcome is ClaimOutcome.CLAIMED


def test_renew_all_extends_the_holders_leases_of_every_job_at_once(backend: Backend):
    store = backend.store
    one, one_ids = submit(store)
    two, two_ids = submit(store)
    store.claim(one.id, one_ids["first"], token="a", lease_ms=SHORT_LEASE_MS)
    store.claim(two.id, two_ids["first"], token="b", lease_ms=SHORT_LEASE_MS)
    store.claim(two.id, two_ids["bg"], token="c", lease_ms=SHORT_LEASE_MS)
    held = {one.id: {one_ids["first"]: "a"}, two.id: {two_ids["first"]: "b", two_ids["bg"]: "stranger"},
            "job_gone": {"call_x": "d"}}
    assert store.renew_all(held, LEASE_MS) == 2
    assert store.renew_all({}, LEASE_MS) == 0
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    assert store.claim(one.id, one_ids["first"], token="e", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    assert store.claim(two.id, two_ids["first"], token="e", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    assert store.claim(two.id, two_ids["bg"], token="e", lease_ms=LEASE_MS).outcome is ClaimOutcome.CLAIMED


# ----------------------------------------------------------------------------------------- commit


def test_commit_appends_releases_dependents_and_counts_open_calls(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["bg"], token="b", lease_ms=LEASE_MS)
    bg = store.commit(plan.id, ids["bg"], token="b", status=CallStatus.DONE)
    assert (bg.outcome, bg.open_calls, bg.released) == (CommitOutcome.COMMITTED, 2, [])  # fire and forget
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    commit = store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE,
                          messages=[message(ids["first"], 2)], events=[finished(plan.id, ids["first"])])
    assert (commit.outcome, commit.open_calls, commit.job_status) == (CommitOutcome.COMMITTED, 1, JobStatus.RUNNING)
    assert commit.released == [r for r in records_of(plan) if r.id == ids["second"]]
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.DONE, ids["second"]: CallStatus.READY,
                                            ids["bg"]: CallStatus.DONE}
    assert store.read_log(plan.id)[2:] == [message(ids["first"], 2)]
    assert events(store, plan.id)[-1] == "call.finished"
    # a redelivered task: duplicate, nothing written twice
    again = store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE,
                         messages=[message(ids["first"], 2)], events=[finished(plan.id, ids["first"])])
    assert again.outcome is CommitOutcome.DUPLICATE
    assert len(store.read_log(plan.id)) == 3 and events(store, plan.id).count("call.finished") == 1
    finished_claim = store.claim(plan.id, ids["first"], token="z", lease_ms=LEASE_MS)
    assert (finished_claim.outcome, finished_claim.status) == (ClaimOutcome.FINISHED, CallStatus.DONE)
    store.claim(plan.id, ids["second"], token="s", lease_ms=LEASE_MS)
    last = store.commit(plan.id, ids["second"], token="s", status=CallStatus.FAILED)
    assert (last.open_calls, last.job_status, last.released) == (0, JobStatus.RUNNING, [])
    assert store.job_info(plan.id).open_calls == 0
    # only the last awaited call's commit brings what finalizing the plan job reads, as finish_inputs reads it
    assert (bg.finish_inputs, commit.finish_inputs) == (None, None)
    assert last.finish_inputs == store.finish_inputs(plan.id)
    assert last.finish_inputs is not None and last.finish_inputs.statuses[ids["second"]] is CallStatus.FAILED
    assert len(last.finish_inputs.log) == 3


def test_commit_of_a_call_that_is_not_running_is_a_duplicate(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    assert store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE).outcome is (
        CommitOutcome.DUPLICATE)
    assert store.commit(plan.id, "call_nope", token="a", status=CallStatus.DONE).outcome is CommitOutcome.DUPLICATE
    assert store.call_statuses(plan.id)[ids["first"]] is CallStatus.READY


# ------------------------------------------------------------------------------------------ retry


def test_release_for_retry(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    assert not store.release_for_retry(plan.id, ids["first"], token="a")  # not running
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    assert not store.release_for_retry(plan.id, ids["first"], token="other")  # another attempt's lease
    event = CallRetrying(job_id=plan.id, call_id=ids["first"], tool="first", attempt=1,
                         error={"type": "E", "message": "m"}, retry_in_s=0.1)
    assert store.release_for_retry(plan.id, ids["first"], token="a", event=event)
    assert store.call_statuses(plan.id)[ids["first"]] is CallStatus.READY
    assert events(store, plan.id)[-1] == "call.retrying"
    # the same release replayed (its reply lost to a store outage) answers True again and publishes nothing
    assert store.release_for_retry(plan.id, ids["first"], token="a", event=event)
    assert not store.release_for_retry(plan.id, ids["first"], token="other", event=event)
    assert events(store, plan.id).count("call.retrying") == 1
    assert store.call_statuses(plan.id)[ids["first"]] is CallStatus.READY
    second = store.claim(plan.id, ids["first"], token="b", lease_ms=LEASE_MS)
    assert (second.attempt, second.lost) == (2, 0)  # a released attempt is not a lost one
    assert not store.release_for_retry(plan.id, ids["first"], token="a", event=event)  # b holds it now


# --------------------------------------------------------------------------------------- finalize


def run_awaited(store, job_id: str, ids: dict[str, str]) -> None:
    """Claim and commit CHAIN's awaited calls (first, then second): no awaited call is open any more."""
    for tool in ("first", "second"):
        store.claim(job_id, ids[tool], token="t", lease_ms=LEASE_MS)
        store.commit(job_id, ids[tool], token="t", status=CallStatus.DONE)


def test_finalize_once_and_signal_the_end(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    run_awaited(store, plan.id, ids)
    assert store.wait_finished(plan.id, 0.01) is None
    record = JobRecord(id=plan.id, status=JobStatus.SUCCEEDED, state={"x": 1}, finished_at="2030-01-01T00:00:00Z")
    assert store.finalize(plan.id, record=record, event=job_finished(plan.id, JobStatus.SUCCEEDED))
    other = JobRecord(id=plan.id, status=JobStatus.FAILED)
    assert not store.finalize(plan.id, record=other, event=job_finished(plan.id, JobStatus.FAILED))
    assert store.wait_finished(plan.id, 1.0) is JobStatus.SUCCEEDED
    assert store.wait_finished(plan.id, 1.0) is JobStatus.SUCCEEDED  # stays for later waiters
    info = store.job_info(plan.id)
    assert (info.status, info.finished_at, info.record) == (JobStatus.SUCCEEDED, "2030-01-01T00:00:00Z", record)
    assert store.record(plan.id) == record
    assert events(store, plan.id) == ["job.queued", "job.finished"]
    assert [e["event"] for _, e in iter_events(store, plan.id)] == ["job.queued", "job.finished"]
    assert store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED)) == (JobStatus.SUCCEEDED, [])
    # calls still run after the job ended (fire-and-forget calls): their claim does not restart the job
    assert store.claim(plan.id, ids["bg"], token="b", lease_ms=LEASE_MS).outcome is ClaimOutcome.CLAIMED
    assert store.job_status(plan.id) is JobStatus.SUCCEEDED


def ended_by_budget(store) -> tuple[JobPlan, dict[str, str], ErrorInfo]:
    """A job that failed (its budget ran out) while its awaited calls were still to run: (its plan, call ids by
    tool, its error)."""
    plan, ids = submit(store)
    error = ErrorInfo("BudgetExceeded", "max_requests: 1 of 1 model requests made or in flight")
    saved = JobRecord(id=plan.id, status=JobStatus.FAILED, error=error, state={"x": 1},
                      finished_at="2030-01-01T00:00:00Z")
    assert store.finalize(plan.id, record=saved, event=job_finished(plan.id, JobStatus.FAILED))
    return plan, ids, error


def test_a_job_ended_with_awaited_calls_open_has_its_record_computed_from_its_log(backend: Backend):
    """A job may end while awaited calls still run (its budget ran out): their outcomes still reach its record."""
    store = backend.store
    plan, ids, error = ended_by_budget(store)
    store.claim(plan.id, ids["first"], token="t", lease_ms=LEASE_MS)
    store.commit(plan.id, ids["first"], token="t", status=CallStatus.DONE, messages=[message(ids["first"], 5)])
    store.add_usage(plan.id, {"requests": 1})
    record = store.record(plan.id)
    assert (record.status, record.error, record.finished_at) == (JobStatus.FAILED, error, "2030-01-01T00:00:00Z")
    assert record.state == {"x": 1, "a": 5} and record.usage["requests"] == 1
    assert store.wait_record(plan.id, 1.0) == record


def test_the_last_late_outcome_of_an_ended_job_stays_in_its_record_until_the_record_is_saved_again(
        backend: Backend):
    """The commit that closes an ended job's last open call leaves the saved record stale: a reader between that
    commit and its caller's saving the record again sees the outcome (computed from the log), never the record
    saved when the job ended without it."""
    store = backend.store
    plan, ids, error = ended_by_budget(store)
    for tool, value in (("first", 5), ("second", 6)):
        store.claim(plan.id, ids[tool], token=tool, lease_ms=LEASE_MS)
        commit = store.commit(plan.id, ids[tool], token=tool, status=CallStatus.DONE,
                              messages=[{"type": "state", "data": {tool: value}, "_call": {"id": ids[tool]}}])
    assert (commit.open_calls, commit.job_status) == (0, JobStatus.FAILED)  # the caller saves the record next
    assert store.job_info(plan.id).record_stale
    record = store.record(plan.id)
    assert (record.status, record.error, record.state) == (JobStatus.FAILED, error, {"x": 1, "first": 5, "second": 6})
    assert store.wait_record(plan.id, 1.0) == record
    again = JobRecord(id=plan.id, status=JobStatus.FAILED, error=error, state={"saved": "again"},
                      finished_at="2030-01-01T00:00:00Z")
    store.save_record(plan.id, again)
    assert not store.job_info(plan.id).record_stale
    assert store.record(plan.id).state == {"saved": "again"}  # the record saved again stands


def test_finish_inputs(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    info, log, statuses = store.finish_inputs(plan.id)
    assert (info.id, log, statuses[ids["second"]]) == (plan.id, plan.context, CallStatus.PENDING)
    with pytest.raises(JobNotFoundError):
        store.finish_inputs("job_nope")


# ----------------------------------------------------------------------------------------- cancel


def test_cancel_stops_unstarted_calls_and_running_ones_release_nothing(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    status, ready = store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    assert (status, ready) == (JobStatus.CANCELED, [ids["bg"]])
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.RUNNING, ids["second"]: CallStatus.CANCELED,
                                            ids["bg"]: CallStatus.CANCELED}
    assert store.wait_finished(plan.id, 1.0) is JobStatus.CANCELED
    assert store.job_info(plan.id).finished_at
    assert store.claim(plan.id, ids["bg"], token="b", lease_ms=LEASE_MS).outcome is ClaimOutcome.CANCELED
    # the running call commits, marked as late, but what waited on it is not released
    commit = store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE,
                          messages=[message(ids["first"], 2)], events=[finished(plan.id, ids["first"])])
    assert (commit.outcome, commit.job_status, commit.released) == (
        CommitOutcome.COMMITTED, JobStatus.CANCELED, [])
    assert store.read_log(plan.id)[2:] == [{**message(ids["first"], 2), "_afterCancel": True}]
    assert [e for _, e in store.read_events(plan.id)][-1] == {**finished(plan.id, ids["first"]).to_dict(),
                                                              "after_cancel": True}
    record = store.record(plan.id)  # what the late call wrote is in the canceled job's state
    assert (record.status, record.result, record.state) == (JobStatus.CANCELED, None, {"x": 1, "a": 2})
    assert not store.finalize(plan.id, record=JobRecord(id=plan.id, status=JobStatus.SUCCEEDED),
                              event=job_finished(plan.id, JobStatus.SUCCEEDED))
    assert store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED)) == (JobStatus.CANCELED, [])
    assert events(store, plan.id) == ["job.queued", "job.finished", "call.finished"]
    # the cancel's event named the call that was still running
    assert [e for _, e in store.read_events(plan.id)][1] == {**job_finished(plan.id, JobStatus.CANCELED).to_dict(),
                                                             "running": [ids["first"]]}


def test_a_call_running_at_the_cancel_whose_attempt_was_lost_is_canceled(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="dead", lease_ms=SHORT_LEASE_MS)
    store.claim(plan.id, ids["bg"], token="alive", lease_ms=LEASE_MS)
    store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    backend.advance(SHORT_LEASE_MS / 1000 + 0.03)
    # a redelivery finds the job canceled: the call whose process died is canceled; the live one keeps running
    # and its task is told to check back when the lease ends
    assert store.claim(plan.id, ids["first"], token="b", lease_ms=LEASE_MS).outcome is ClaimOutcome.CANCELED
    assert store.claim(plan.id, ids["bg"], token="c", lease_ms=LEASE_MS).outcome is ClaimOutcome.LEASED
    assert store.call_statuses(plan.id) == {ids["first"]: CallStatus.CANCELED, ids["second"]: CallStatus.CANCELED,
                                            ids["bg"]: CallStatus.RUNNING}
    [finished_event] = [e for _, e in store.read_events(plan.id) if e["event"] == "job.finished"]
    assert finished_event["running"] == sorted([ids["first"], ids["bg"]])


def test_cancel_before_anything_started(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    status, ready = store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    assert (status, sorted(ready)) == (JobStatus.CANCELED, sorted([ids["first"], ids["bg"]]))
    assert set(store.call_statuses(plan.id).values()) == {CallStatus.CANCELED}
    assert store.claim(plan.id, ids["second"], token="x", lease_ms=LEASE_MS).outcome is ClaimOutcome.CANCELED


def test_a_claim_after_cancel_marks_a_ready_call_canceled(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.claim(plan.id, ids["first"], token="a", lease_ms=LEASE_MS)
    store.commit(plan.id, ids["first"], token="a", status=CallStatus.DONE)  # releases second
    store.cancel(plan.id, event=job_finished(plan.id, JobStatus.CANCELED))
    assert store.call_statuses(plan.id)[ids["second"]] is CallStatus.CANCELED


# -------------------------------------------------------------------------------------- rejection


def test_record_rejection_once(backend: Backend):
    store = backend.store
    error = ErrorInfo("JobValidationError", "job rejected", problems=({"pointer": "/calls", "message": "m"},))
    assert store.record_rejection("job_rejected", error, ttl_s=60)
    assert store.job_status("job_rejected") is JobStatus.FAILED
    assert store.wait_finished("job_rejected", 1.0) is JobStatus.FAILED
    record = store.record("job_rejected")
    assert (record.status, record.error) == (JobStatus.FAILED, error)
    assert record.to_dict()["error"] == {"type": "JobValidationError", "message": "job rejected",
                                         "problems": [{"pointer": "/calls", "message": "m"}]}
    assert not store.record_rejection("job_rejected", ErrorInfo("E", "other"), ttl_s=60)
    assert store.job_info("job_rejected").error == error
    plan = make_plan({"calls": [{"_tool": "bg"}]}, TOOLS, job_id="job_rejected")
    assert not store.create_job(plan, records_of(plan), submitted={}, events=[])
    # an existing job is not overwritten by a rejection either
    plan, _ = submit(store)
    assert not store.record_rejection(plan.id, error, ttl_s=60)
    assert store.job_status(plan.id) is JobStatus.QUEUED


# ------------------------------------------------------------------------------------------ fleet


def test_tools_and_workers(backend: Backend):
    store = backend.store
    fleet_part = RedisFleet(store)
    assert fleet_part.publish_tools({"a": {"v": 1}}, publisher="w1") == []
    assert fleet_part.publish_tools({"a": {"v": 1}, "b": {}}, publisher="w2") == []
    assert fleet_part.publish_tools({"a": {"v": 2}}, publisher="w3") == ["a"]
    assert fleet_part.published_tools() == {"a": {"v": 2}, "b": {}}
    assert fleet_part.tool_conflicts()["a"]["publisher"] == "w3"
    fleet_part.announce_worker("w1", WorkerAnnouncement("w1", activities=({"name": "fetch", "queue": "io"},)), ttl_s=60)
    fleet_part.announce_worker("w2", WorkerAnnouncement("w2", activities=({"name": "fetch", "queue": "io"},)), ttl_s=60)
    live = fleet_part.live_activities()
    assert live["fetch"]["queue"] == "io" and sorted(live["fetch"]["workers"]) == ["w1", "w2"]
    fleet_part.retire_worker("w1")
    assert fleet_part.live_activities()["fetch"]["workers"] == ["w2"]


FETCH = {"name": "fetch", "task": "agentq.activity.fetch", "queue": "io", "retries": 2}
SEND = {"name": "send", "task": "agentq.activity.send", "queue": "mail", "retries": 0}


def test_an_activity_stays_known_after_its_workers_are_gone(backend: Backend):
    store = backend.store
    fleet_part = RedisFleet(store)
    assert fleet_part.known_activities(60) == {}
    fleet_part.announce_worker("w1", WorkerAnnouncement("w1", activities=(FETCH, SEND)), ttl_s=60)
    fleet_part.announce_worker("w2", WorkerAnnouncement("w2", activities=(FETCH,)), ttl_s=60)
    known = fleet_part.known_activities(60)
    assert list(known) == ["fetch", "send"]  # sorted by name
    fetch = known["fetch"]
    assert {k: fetch[k] for k in FETCH} == FETCH
    assert fetch["live"] is True and sorted(fetch["workers"]) == ["w1", "w2"]
    assert fetch["last_seen"].endswith("Z") and datetime.fromisoformat(fetch["last_seen"]).tzinfo is not None
    assert (known["send"]["queue"], known["send"]["workers"]) == ("mail", ["w1"])

    fleet_part.retire_worker("w1")  # `send` has no live worker now, `fetch` still one
    known = fleet_part.known_activities(60)
    assert (known["send"]["live"], known["send"]["workers"], known["send"]["queue"]) == (False, [], "mail")
    assert known["send"]["task"] == "agentq.activity.send" and "last_seen" in known["send"]
    assert (known["fetch"]["live"], known["fetch"]["workers"]) == (True, ["w2"])
    assert set(fleet_part.live_activities()) == {"fetch"}  # live ones only, as before


def test_an_expired_announcement_leaves_the_activity_known_until_its_memory_runs_out(backend: Backend):
    store = backend.store
    fleet_part = RedisFleet(store)
    fleet_part.announce_worker("w1", WorkerAnnouncement("w1", activities=(FETCH,)), ttl_s=0.1)
    first = fleet_part.known_activities(60)["fetch"]
    backend.advance(0.2)  # the heartbeat expired: not live, still known
    assert fleet_part.live_activities() == {}
    after = fleet_part.known_activities(60)["fetch"]
    assert (after["live"], after["workers"], after["queue"], after["last_seen"]) == (
        False, [], "io", first["last_seen"])
    # a memory shorter than its age forgets it, in the store too (a longer memory does not bring it back)
    assert fleet_part.known_activities(0.15) == {}
    assert fleet_part.known_activities(60) == {}
    # announced again: known again
    fleet_part.announce_worker("w2", WorkerAnnouncement("w2", activities=(FETCH,)), ttl_s=60)
    assert fleet_part.known_activities(0.15)["fetch"]["workers"] == ["w2"]


def test_forget_an_activity(backend: Backend):
    store = backend.store
    fleet_part = RedisFleet(store)
    fleet_part.announce_worker("w1", WorkerAnnouncement("w1", activities=(FETCH,)), ttl_s=0.1)
    assert not fleet_part.forget_activity("nope")
    backend.advance(0.2)
    assert fleet_part.forget_activity("fetch") is True
    assert fleet_part.known_activities(60) == {}
    assert fleet_part.forget_activity("fetch") is False
    # a live worker's activity is known while it is announced, forgotten or not
    fleet_part.announce_worker("w2", WorkerAnnouncement("w2", activities=(FETCH,)), ttl_s=60)
    assert fleet_part.forget_activity("fetch") is True
    assert fleet_part.known_activities(60)["fetch"]["live"] is True
    fleet_part.retire_worker("w2")
    assert fleet_part.known_activities(60) == {}


# ----------------------------------------------------------------------------------------- events


def test_read_events_after_an_id_with_count_and_block(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    store.add_events(plan.id, [finished(plan.id, ids["bg"]), finished(plan.id, ids["first"])])
    entries = store.read_events(plan.id)
    assert [e["event"] for _, e in entries] == ["job.queued", "call.finished", "call.finished"]
    assert [e["call_id"] for _, e in store.read_events(plan.id, entries[0][0], count=1)] == [ids["bg"]]
    assert store.read_events(plan.id, entries[-1][0]) == []
    assert store.read_events(plan.id, entries[-1][0], block_ms=20) == []
    store.add_events(plan.id, [])  # nothing to add: nothing added
    assert len(store.read_events(plan.id)) == 3


def test_waiters_wake_up_when_the_job_ends(backend: Backend):
    import threading

    store = backend.store
    plan, _ = submit(store)
    record = JobRecord(id=plan.id, status=JobStatus.FAILED, error=ErrorInfo("E", "m"))
    timer = threading.Timer(0.05, lambda: store.finalize(plan.id, record=record,
                                                          event=job_finished(plan.id, JobStatus.FAILED)))
    timer.start()
    try:
        assert store.wait_finished(plan.id, 5.0) is JobStatus.FAILED
    finally:
        timer.join()
    followed = [e["event"] for _, e in iter_events(store, plan.id, block_ms=50)]
    assert followed == ["job.queued", "job.finished"]


def test_iter_events_follows_a_running_job_to_its_end(backend: Backend):
    import threading

    store = backend.store
    plan, _ = submit(store)
    record = JobRecord(id=plan.id, status=JobStatus.SUCCEEDED)
    timer = threading.Timer(0.05, lambda: store.finalize(plan.id, record=record,
                                                          event=job_finished(plan.id, JobStatus.SUCCEEDED)))
    timer.start()
    try:
        followed = [e["event"] for _, e in iter_events(store, plan.id, block_ms=20)]
    finally:
        timer.join()
    assert followed == ["job.queued", "job.finished"]
    assert [e["event"] for _, e in iter_events(store, plan.id, follow=False)] == ["job.queued", "job.finished"]
