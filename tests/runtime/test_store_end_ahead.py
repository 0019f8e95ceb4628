"""A plan job's end written by the commit of its last awaited call (Redis store): the claim of the job's one open
awaited call sends what finalizing reads (`Claimed.last`), the worker builds the job's end from it and its outcome
(`engine/finalize.end_ahead`), and the commit writes it when nothing changed since the claim. Otherwise the commit
is as without it, and the job-progress step finalizes the job after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.engine.finalize import end_ahead, finalize_job
from agentq.protocol.digests import dumps
from agentq.protocol.envelopes import CallFinished, JobFinished, JobQueued, JobStarted
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.replies import Claimed, Committed
from agentq.store.state import StateStore
from tests.runtime.conftest import make_plan, records_of, tool_schema

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}}), "bg": tool_schema("bg")}
ONE = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}
WITH_BG = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}, {"_tool": "bg"}]}
TWO = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"},
                 {"_tool": "first", "x": 2, "_outputPath": "†state.b"}]}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    store = StateStore(redis_url)
    yield store
    store.close()


def submit(store: StateStore, job: dict, job_id: str) -> list:
    plan = make_plan(job, TOOLS, job_id=job_id)
    assert store.create_job(plan, records_of(plan), submitted=job,
                            events=[JobQueued(job_id=job_id, kind="plan", calls=len(plan.calls))])
    return records_of(plan)


def claim(store: StateStore, job_id: str, call_id: str, token: str) -> Claimed:
    claimed = store.claim(job_id, call_id, token=token, lease_ms=60_000, job_started=JobStarted(job_id=job_id),
                          last_call=True)
    assert isinstance(claimed, Claimed)
    return claimed


def commit(store: StateStore, job_id: str, claimed: Claimed, call_id: str, token: str) -> Committed:
    messages = [{"type": "state", "data": {"a": 1}, "_call": {"id": call_id}}]
    planned = end_ahead(job_id, claimed.last, call_id, messages, source="agentq") if claimed.last else None
    done = CallFinished(job_id=job_id, call_id=call_id, tool="first", status="done", duration_ms=1.0)
    committed = store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages, events=[done],
                             awaited=True, ahead=planned.end if planned else None)
    assert isinstance(committed, Committed)
    return committed


def events(store: StateStore, job_id: str) -> list[str]:
    return [e["event"] for _, e in store.read_events(job_id)]


def test_the_commit_of_a_one_call_jobs_call_ends_the_job_as_finalizing_would(store: StateStore):
    totals = dict(store.redis.hgetall(store.fleet.job_totals))
    for job_id in ("job_ahead", "job_after"):
        (record,) = submit(store, ONE, job_id)
        claimed = claim(store, job_id, record.id, "t")
        assert claimed.last is not None and claimed.last.inputs.info.status is JobStatus.RUNNING
        if job_id == "job_after":  # the usual way: finalized after the commit, from what its reply brought
            committed = store.commit(job_id, record.id, token="t", status=CallStatus.DONE, awaited=True,
                                     messages=[{"type": "state", "data": {"a": 1}, "_call": {"id": record.id}}],
                                     events=[CallFinished(job_id=job_id, call_id=record.id, tool="first",
                                                          status="done", duration_ms=1.0)])
            assert isinstance(committed, Committed) and not committed.finalized
            assert committed.finish_inputs is not None
            assert finalize_job(store, job_id, inputs=committed.finish_inputs).ended
            continue
        committed = commit(store, job_id, claimed, record.id, "t")
        assert committed.finalized and committed.finish_inputs is None and committed.open_calls == 0
    ahead, after = store.record("job_ahead"), store.record("job_after")
    assert ahead.status is JobStatus.SUCCEEDED and ahead.state == {"a": 1} and ahead.result == {"a": 1}
    assert ahead.to_dict() | {"id": "", "created_at": "", "finished_at": ""} == (
        after.to_dict() | {"id": "", "created_at": "", "finished_at": ""})
    for job_id in ("job_ahead", "job_after"):
        assert events(store, job_id) == ["job.queued", "job.started", "call.finished", "job.finished"]
        assert store.redis.lrange(store.keys(job_id).done, 0, -1) == ["succeeded"]
        assert store.redis.pttl(store.keys(job_id).done) > 0
        assert store.redis.zscore(store.fleet.active_jobs, job_id) is None
    assert int(store.redis.hget(store.fleet.job_totals, "succeeded") or 0) == int(totals.get("succeeded", 0)) + 2
    # the job ended once: finalizing it again (a redelivered task's recovery) changes nothing
    assert not store.finalize("job_ahead", record=ahead, event=JobFinished(job_id="job_ahead", status="succeeded"))


def test_a_claim_sends_what_finalizing_reads_only_for_the_jobs_one_open_awaited_call(store: StateStore):
    first, second = submit(store, TWO, "job_two")
    assert claim(store, "job_two", first.id, "a").last is None  # two awaited calls are open
    unasked = store.claim("job_two", second.id, token="b", lease_ms=60_000)
    assert isinstance(unasked, Claimed) and unasked.last is None  # not asked for
    first, bg = submit(store, WITH_BG, "job_bg")
    assert not bg.awaited
    assert claim(store, "job_bg", bg.id, "a").last is not None  # the job's one open awaited call is another
    last = claim(store, "job_bg", first.id, "b").last
    assert last is not None and set(last.inputs.statuses) == {first.id, bg.id}


@pytest.mark.parametrize("change", ["usage", "log", "cancel"])
def test_a_commit_after_the_job_or_its_log_changed_since_the_claim_leaves_the_end_to_the_progress_step(
        store: StateStore, change: str):
    job_id = f"job_changed_{change}"
    (record,) = submit(store, ONE, job_id)
    claimed = claim(store, job_id, record.id, "t")
    if change == "usage":
        store.add_usage(job_id, {"input_tokens": 5})
    elif change == "log":
        store.redis.rpush(store.keys(job_id).log, dumps({"type": "state", "data": {"z": 1}}))
    else:
        store.redis.hset(store.keys(job_id).job, "status", JobStatus.CANCELED.value)
    committed = commit(store, job_id, claimed, record.id, "t")
    assert not committed.finalized
    assert store.redis.lrange(store.keys(job_id).done, 0, -1) == []
    assert "job.finished" not in events(store, job_id)
    if change != "cancel":
        assert committed.finish_inputs is not None and store.job_status(job_id) is JobStatus.RUNNING
