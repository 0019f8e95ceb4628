"""Unit tests of `JobService` on a `StateStore` (the session's private Redis) with a recording dispatcher: submission
writes all or nothing, rejections, job ids, routing, cancellation, submission by task name. No Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.engine.routing import LATENT_TASK, activity_task
from agentq.errors import JobNotFoundError, JobValidationError
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.runtime.conftest import Rig, job_keys, tool_schema

pytestmark = pytest.mark.timeout(10)

CHAIN = {"context": [{"type": "state", "data": {"x": 1}}],
         "calls": [{"_tool": "first", "x": "†state.x", "_outputPath": "†state.a"},
                   {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"},
                   {"_tool": "first", "x": 5, "_outputPath": "†state.c"}]}


@pytest.fixture
def rig(redis_store: StateStore) -> Iterator[Rig]:
    rig = Rig(redis_store)
    rig.activity("first", lambda call: call["x"] + 1, {"x": {"type": "number"}})
    rig.activity("second", lambda call: call["y"] * 2, {"y": {"type": "number"}})
    yield rig
    rig.executor.leases.stop()


def nothing_written(store: StateStore, job_id: str) -> bool:
    with pytest.raises(JobNotFoundError):
        store.job_info(job_id)
    return store.call_statuses(job_id) == {} and store.read_events(job_id) == []


def test_submit_writes_the_job_and_dispatches_the_ready_calls(rig: Rig):
    job_id = rig.service.submit(CHAIN, job_id="job_ok")
    assert job_id == "job_ok"
    info = rig.store.job_info(job_id)
    assert (info.status, info.open_calls) == (JobStatus.QUEUED, 3)
    records = rig.store.call_records(job_id)
    # stored in plan order (a hash: Redis keeps no order of its own)
    assert [(r.index, r.tool) for r in sorted(records.values(), key=lambda r: r.index)] == [
        (0, "first"), (1, "second"), (2, "first")]
    sent = [r for _, r in rig.dispatcher.sent]
    assert [r.index for r in sent] == [0, 2]  # the second call waits on the first
    assert all((r.task, r.queue) == (activity_task(r.activity), activity_task(r.activity)) for r in sent)
    assert sent == [records[r.id] for r in sent]  # the task carries the stored record
    assert [e["event"] for _, e in rig.store.read_events(job_id)] == ["job.queued"]
    assert rig.dispatcher.ticks == []


def test_a_rejected_job_writes_nothing(rig: Rig):
    job = {"calls": [{"_tool": "first", "x": "not a number"}, {"_tool": "nope"}]}
    with pytest.raises(JobValidationError) as rejected:
        rig.service.submit(job, job_id="job_bad")
    pointers = [p.pointer for p in rejected.value.problems]
    assert len(pointers) == 2 and all(p.startswith("/calls/") for p in pointers)
    assert nothing_written(rig.store, "job_bad")
    assert rig.dispatcher.sent == []


def test_a_taken_job_id_is_rejected_and_the_first_job_is_left_alone(rig: Rig):
    rig.service.submit(CHAIN, job_id="job_once")
    before = (rig.store.call_records("job_once"), rig.store.read_log("job_once"))
    with pytest.raises(JobValidationError, match="exists already"):
        rig.service.submit({"calls": [{"_tool": "first", "x": 9, "_outputPath": "†state.z"}]}, job_id="job_once")
    assert (rig.store.call_records("job_once"), rig.store.read_log("job_once")) == before
    assert len(rig.dispatcher.sent) == 2  # only the first job's ready calls


@pytest.mark.parametrize("job_id", ["has space", "x{slot}", "", "a" * 200, 42])
def test_job_ids_are_checked_before_anything_is_written(rig: Rig, job_id):
    with pytest.raises(JobValidationError):
        rig.service.submit(CHAIN, job_id=job_id)
    assert job_keys(rig.store) == [] and rig.dispatcher.sent == []


def test_size_and_depth_limits_reject_before_planning(redis_store: StateStore):
    rig = Rig(redis_store, settings=Settings(max_job_bytes=200, max_depth=4))
    with pytest.raises(JobValidationError, match="AGENTQ_MAX_JOB_BYTES"):
        rig.service.submit('{"calls": []' + " " * 300 + "}", job_id="job_big")
    with pytest.raises(JobValidationError):
        rig.service.submit({"context": [{"type": "state", "data": {"a": {"b": {"c": {"d": 1}}}}}], "calls": []},
                           job_id="job_deep")
    with pytest.raises(JobValidationError):
        rig.service.submit('{"calls": [' * 10 + "]" * 10 + "}", job_id="job_deep2")
    assert job_keys(redis_store) == []
    rig.executor.leases.stop()


def test_latent_calls_go_to_the_configured_engine_queue(redis_store: StateStore):
    rig = Rig(redis_store, settings=Settings(engine_queue="llm-bound"))
    rig.tools.register("summarize", tool_schema("summarize", {"text": {"type": "string"}}))  # no activity: latent
    rig.activity("fetch", lambda call: "page", queue="io")
    rig.service.submit({"calls": [{"_tool": "summarize", "text": "hi", "_outputPath": "†state.s"},
                                  {"_tool": "fetch", "_outputPath": "†state.p"}]}, job_id="job_route")
    routes = {r.tool: (r.task, r.queue) for _, r in rig.dispatcher.sent}
    assert routes == {"summarize": (LATENT_TASK, "llm-bound"), "fetch": (activity_task("fetch"), "io")}
    stored = {r.tool: (r.task, r.queue) for r in redis_store.call_records("job_route").values()}
    assert stored == routes
    rig.executor.leases.stop()


def test_announced_queues_of_live_workers_route_explicit_calls(rig: Rig):
    RedisFleet(rig.store).announce_worker("w1", WorkerAnnouncement("w1", activities=(
        {"name": "remote", "queue": "gpu", "task": activity_task("remote")},)), ttl_s=60)
    RedisFleet(rig.store).publish_tools({"remote": tool_schema("remote")}, publisher="w1")
    rig.service.submit({"calls": [{"_tool": "remote", "_outputPath": "†state.r"}]}, job_id="job_remote")
    [(_, record)] = rig.dispatcher.sent
    assert (record.activity, record.task, record.queue) == ("remote", activity_task("remote"), "gpu")


def test_an_agent_job_is_ticked_not_dispatched(rig: Rig):
    job_id = rig.service.submit({"context": [{"type": "text", "text": "do it"}]})
    assert rig.dispatcher.ticks == [job_id] and rig.dispatcher.sent == []


def test_a_job_that_awaits_no_call_ends_at_submission(rig: Rig):
    empty = rig.service.submit({"context": [{"type": "state", "data": {"x": 1}}], "calls": []})
    assert rig.store.record(empty).status is JobStatus.SUCCEEDED
    assert rig.store.record(empty).result == {"x": 1}
    rig.activity("bg", lambda call: None)
    fire_and_forget = rig.service.submit({"calls": [{"_tool": "bg"}]})
    assert rig.store.job_status(fire_and_forget) is JobStatus.SUCCEEDED
    assert [r.tool for _, r in rig.dispatcher.sent] == ["bg"]  # still sent: it runs after its job ended
    assert rig.drain() == ["done"]
    finished = [e for _, e in rig.store.read_events(fire_and_forget) if e["event"] == "job.finished"]
    assert len(finished) == 1


def test_cancel_revokes_ready_calls_and_saves_the_record(rig: Rig):
    job_id = rig.service.submit(CHAIN, job_id="job_cancel")
    first = rig.dispatcher.sent[0][1]
    assert rig.executor.run_call(job_id, first.id, record=first).status == "done"  # releases the second call
    assert rig.service.cancel(job_id) is JobStatus.CANCELED
    [(revoked_job, revoked)] = rig.dispatcher.revoked
    ready = {r.id for r in rig.store.call_records(job_id).values() if r.index in (1, 2)}
    assert revoked_job == job_id and set(revoked) == ready
    assert set(rig.store.call_statuses(job_id).values()) == {CallStatus.DONE, CallStatus.CANCELED}
    record = rig.store.record(job_id)
    assert (record.status, record.state, record.result) == (JobStatus.CANCELED, {"x": 1, "a": 2}, None)
    assert rig.store.wait_finished(job_id, 1.0) is JobStatus.CANCELED
    # cancelling again: the store answers "already ended (canceled)", which the service cannot tell from a
    # cancel of its own, so it revokes nothing (an empty list) and saves the record again
    assert rig.service.cancel(job_id) is JobStatus.CANCELED
    assert rig.dispatcher.revoked[1:] == [(job_id, [])]
    # an ended job: its status, nothing revoked
    done = rig.service.submit({"calls": []})
    assert rig.service.cancel(done) is JobStatus.SUCCEEDED and len(rig.dispatcher.revoked) == 2
    with pytest.raises(JobNotFoundError):
        rig.service.cancel("job_missing")


def test_submit_by_task_records_a_rejection(rig: Rig):
    rig.service.submit_by_task({"calls": [{"_tool": "nope"}]}, job_id="job_rejected")
    record = rig.store.record("job_rejected")
    assert record.status is JobStatus.FAILED and record.error is not None
    assert "nope" in str(record.error)
    assert rig.store.wait_finished("job_rejected", 1.0) is JobStatus.FAILED
    assert rig.dispatcher.sent == []


def test_submit_by_task_with_an_unusable_id_writes_nothing(rig: Rig):
    rig.service.submit_by_task({"calls": [{"_tool": "nope"}]}, job_id="bad id")
    rig.service.submit_by_task({"calls": [{"_tool": "nope"}]}, job_id=7)
    rig.service.submit_by_task({"calls": [{"_tool": "nope"}]})  # no id: only logged
    assert job_keys(rig.store) == []


def test_submit_by_task_submits_a_valid_job(rig: Rig):
    rig.service.submit_by_task(CHAIN, job_id="job_by_task")
    assert rig.store.job_status("job_by_task") is JobStatus.QUEUED
    assert len(rig.dispatcher.sent) == 2
    assert rig.drain() == ["done", "done", "done"]
    assert rig.store.record("job_by_task").state == {"x": 1, "a": 2, "b": 4, "c": 6}


def test_available_tools_are_the_published_ones_overridden_by_the_local_registry(rig: Rig):
    RedisFleet(rig.store).publish_tools({"first": {"published": True}, "other": {"v": 1}}, publisher="w")
    tools = rig.service.available_tools()
    assert tools["other"] == {"v": 1}
    assert tools["first"] == rig.tools.snapshot()["first"]
