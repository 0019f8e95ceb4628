"""What the check after a restart of the store publishes again of the engine's work (`runtime/engine_restarts.py`),
on the session's private Redis: ready engine calls and due ticks of active jobs whose tasks the broker does not
hold; never an activity's call (admission's), a tick in flight, a job that waits on its calls or has not started."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from agentq.engine.routing import tick_task_id
from agentq.protocol.status import CallStatus, JobStatus
from agentq.runtime.app import task_id
from agentq.runtime.engine_restarts import lost_engine_work
from agentq.store.state import StateStore
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel

pytestmark = pytest.mark.timeout(20)

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
ENGINE = "agentq.engine"


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def _rig(engines: Engines, *answers: dict) -> Engine:
    rig = Engine(engines.store, llm=ScriptedModel.replies(*answers))
    engines.append(rig)
    rig.activity("weather", lambda call: {"city": call["city"]}, {"city": {"type": "string"}}, required=("city",))
    return rig


def _lost(rig: Engine, held: set[str] | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, int]]]:
    asked: list[list[str]] = []

    def holds(queues: Sequence[str]) -> set[str]:
        asked.append(list(queues))
        return held or set()

    work = lost_engine_work(rig.store, holds, ENGINE, task_id)
    assert all(ENGINE in queues for queues in asked)
    return [(j, r.id) for j, r in work.calls], work.ticks


def test_a_due_first_tick_and_a_ready_wait_call_are_found_unless_the_broker_holds_their_tasks(engines: Engines):
    rig = _rig(engines)
    agent = rig.service.submit({"context": [{"type": "text", "text": "Weather?"}], "tools": ["weather"],
                                "output": OUTPUT})
    waiting = rig.service.submit({"tools": ["waitForSignal"], "calls": [
        {"_tool": "waitForSignal", "name": "go", "timeout_s": 60, "_outputPath": "†state.go"}]})
    plan = rig.service.submit({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.w"}]})
    [wait_call] = rig.store.call_records(waiting)
    calls, ticks = _lost(rig)
    assert calls == [(waiting, wait_call)] and ticks == [(agent, 0)]  # the plan job's activity call is admission's
    assert _lost(rig, {tick_task_id(agent, 0), task_id(waiting, wait_call)}) == ([], [])
    assert rig.store.job_status(plan) is JobStatus.QUEUED


def test_no_tick_while_calls_are_open_or_a_tick_holds_its_lease_and_the_next_once_the_calls_ended(engines: Engines):
    rig = _rig(engines, {"calls": [{"_tool": "weather", "city": "Rome", "_outputPath": "†state.w"}], "output": None},
               {"calls": [], "output": {"answer": "warm"}})
    job_id = rig.service.submit({"context": [{"type": "text", "text": "Weather?"}], "tools": ["weather"],
                                 "output": OUTPUT})
    assert rig.run(limit=1) == []  # tick 0 wrote the call
    assert _lost(rig) == ([], [])  # its call is open (an activity's: admission's)
    call = rig.dispatcher.queue.popleft()
    assert call.record is not None
    rig.dispatcher.tick = lambda job_id, n=0: None  # type: ignore[method-assign]  # its sender died
    rig.executor.run_call(job_id, call.record.id, record=call.record)
    assert _lost(rig) == ([], [(job_id, 1)])
    claimed = rig.store.begin_tick(job_id, exchanges=1, token="t", lease_ms=30_000)
    assert claimed.outcome == "claimed"
    assert _lost(rig) == ([], [])  # tick 1 in flight, its lease held
    rig.store.redis.delete(rig.store.keys(job_id).tick_lease)  # its process died with it
    assert _lost(rig) == ([], [(job_id, 1)])


def test_ended_scheduled_and_waiting_jobs_are_not_looked_at(engines: Engines):
    rig = _rig(engines)
    later = rig.service.submit({"context": [{"type": "text", "text": "Later"}], "tools": ["weather"],
                                "output": OUTPUT, "options": {"delay_s": 600}})
    assert rig.store.job_status(later) is JobStatus.SCHEDULED
    done = rig.service.submit({"tools": ["sleep"], "calls": [{"_tool": "sleep", "seconds": 0}]})
    rig.service.cancel(done)
    assert _lost(rig) == ([], [])


def test_a_plan_job_whose_calls_ended_without_its_end_is_ended_by_the_task_of_one_of_them(engines: Engines):
    """The process that committed a plan job's last call died before ending the job: one ended call's task is
    found (unless the broker holds it), and its delivery ends the job."""
    rig = _rig(engines)
    plan = rig.service.submit({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.o"},
                                          {"_tool": "weather", "city": "Rome", "_outputPath": "†state.r"}]})
    running = rig.service.submit({"calls": [{"_tool": "weather", "city": "Nice", "_outputPath": "†state.n"}]})
    records = rig.store.call_records(plan)
    for call_id in records:  # committed by a process that died before the job's next step
        rig.store.claim(plan, call_id, token=f"t-{call_id}", lease_ms=30_000)
        rig.store.commit(plan, call_id, token=f"t-{call_id}", status=CallStatus.DONE)
    assert rig.store.job_status(plan) is JobStatus.RUNNING
    last = max(records)
    found = lost_engine_work(rig.store, lambda queues: set(), ENGINE, task_id)
    assert [(j, r.id) for j, r in found.ends] == [(plan, last)]  # not the job whose call is open
    assert lost_engine_work(rig.store, lambda queues: {task_id(plan, last)}, ENGINE, task_id).ends == []
    rig.executor.run_call(plan, last, record=records[last])  # its task delivered again
    assert rig.store.job_status(plan) is JobStatus.SUCCEEDED
    assert rig.store.job_status(running) is JobStatus.QUEUED
    assert lost_engine_work(rig.store, lambda queues: set(), ENGINE, task_id).ends == []
