"""What follows a commit goes out even when the process that committed could not send it.

A call's commit and the sending of what follows it (an agent job's next tick, released calls) are two steps. When the
process dies between them, the broker delivers the call's task again: that delivery finds the call committed and
takes the job's next step, as the first would have. When the broker refused what followed (it was down, or a Redis
broker was loading its data after a restart), the task is handed back instead of failing (a failed task is
acknowledged, and what followed would be lost for good); its next delivery sends it. A tick's task delivered again
after its request was made (its process died, or could not send its calls or the next tick) sends the job's ready
calls again and the next tick when it is due. No tick is asked twice: a tick is claimed once by its number; no call
runs twice: a call is claimed once.

The engine runs on the session's private Redis; the tasks are Celery's own, applied in this process (a retry runs the
task again at once, as the broker's next delivery would).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu.exceptions import OperationalError

from agentq.protocol.status import JobStatus
from agentq.runtime.app import create_app, register_activity_tasks, register_engine_tasks
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel

pytestmark = pytest.mark.timeout(30)

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
JOB = {"context": [{"type": "text", "text": "How is the weather in Paris?"}], "tools": ["weather"], "output": OUTPUT}


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def _rig(engines: Engines) -> tuple[Engine, ScriptedModel]:
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"}], "output": None},
        {"calls": [], "output": {"answer": "mild"}})
    rig = Engine(engines.store, llm=model)
    engines.append(rig)
    rig.activity("weather", lambda call: {"city": call["city"], "temp_c": 21}, {"city": {"type": "string"}},
                 required=("city",))
    return rig, model


class LosesTicks:
    """The rig's dispatcher, whose next `times` ticks are not sent: `error` raised (the broker refused them), or
    dropped (the process died before sending them)."""

    def __init__(self, rig: Engine, times: int, error: Exception | None = None):
        self.rig, self.times, self.error = rig, times, error
        self.send = rig.dispatcher.tick
        rig.dispatcher.tick = self  # type: ignore[method-assign]

    def __call__(self, job_id: str, n: int = 0) -> None:
        if self.times > 0:
            self.times -= 1
            if self.error is not None:
                raise self.error
            return
        self.send(job_id, n)


def _ticks(rig: Engine, job_id: str) -> list[int]:
    return [t.n for t in rig.dispatcher.sent if t.record is None and t.job_id == job_id]


def test_a_redelivered_task_of_the_last_committed_call_sends_the_agents_next_tick(engines: Engines):
    rig, model = _rig(engines)
    job_id = rig.service.submit(JOB)
    assert rig.run(limit=1) == []  # tick 0 writes the call
    task = rig.dispatcher.queue.popleft()
    assert task.record is not None
    LosesTicks(rig, 1)  # the process dies right after the commit
    assert rig.executor.run_call(job_id, task.record.id, record=task.record).status == "done"
    info = rig.store.job_info(job_id)
    assert (info.open_calls, info.ticking, _ticks(rig, job_id)) == (0, False, [0])  # stuck without a redelivery
    assert rig.executor.run_call(job_id, task.record.id, record=task.record).status == "finished"
    assert _ticks(rig, job_id) == [0, 1]
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
    # a late copy of the call's task, after the job ended: nothing more is asked
    assert rig.executor.run_call(job_id, task.record.id, record=task.record).status == "finished"
    assert rig.run() == [] and len(model.requests) == 2


def test_a_call_task_whose_next_tick_the_broker_refused_is_handed_back_and_its_redelivery_sends_it(
        engines: Engines):
    rig, model = _rig(engines)
    app = create_app(Settings(redis_url=engines.store.url))
    register_activity_tasks(app, rig.executor, rig.activities, rig.executor.agent.routing, store_retry_s=1.0)
    job_id = rig.service.submit(JOB)
    rig.run(limit=1)
    task = rig.dispatcher.queue.popleft()
    assert task.record is not None
    LosesTicks(rig, 1, OperationalError("Redis is loading the dataset in memory"))
    result: Any = app.tasks[task.record.task].apply(args=[job_id, task.record.id, task.record.to_task()])
    assert result.successful(), result.traceback  # handed back, delivered again: it found its call committed
    assert result.result == "finished"  # (not .get(): a worker run in this process marks joins as blocking)
    assert rig.runs["weather"] == 1 and _ticks(rig, job_id) == [0, 1]
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED and len(model.requests) == 2


def test_a_tick_task_delivered_again_after_its_request_sends_the_next_tick_once(engines: Engines):
    model = ScriptedModel.replies({"calls": [], "output": None}, {"calls": [], "output": {"answer": "mild"}})
    rig = Engine(engines.store, llm=model)
    engines.append(rig)
    app = create_app(Settings(redis_url=engines.store.url))
    register_engine_tasks(app, rig.executor, rig.service, rig.executor.agent.routing)
    job_id = rig.service.submit({**JOB, "tools": []})
    assert rig.dispatcher.queue.popleft().n == 0
    LosesTicks(rig, 1, OperationalError("Connection refused"))
    result: Any = app.tasks["agentq.engine.tick"].apply(args=[job_id, 0])
    assert result.successful(), result.traceback  # handed back; its next delivery found request 0 made
    assert len(model.requests) == 1 and _ticks(rig, job_id) == [0, 1]
    app.tasks["agentq.engine.tick"].apply(args=[job_id, 0])  # one more late copy: tick 1 is sent again, not asked
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED and len(model.requests) == 2


def test_a_tick_task_delivered_again_while_the_calls_of_its_request_run_asks_and_runs_nothing_twice(
        engines: Engines):
    """The late copy cannot tell a call whose task waits on its queue from one whose task was never sent: it sends
    the ready call's task again. The copy finds the call claimed, and its end's next tick, sent by both, is asked
    once."""
    rig, model = _rig(engines)
    job_id = rig.service.submit(JOB)
    assert rig.run(limit=1) == []  # tick 0 wrote the call, which is still open
    assert rig.executor.tick(job_id, 0) is None  # a late copy of tick 0
    assert _ticks(rig, job_id) == [0] and len(model.requests) == 1
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
    assert rig.runs["weather"] == 1 and len(model.requests) == 2


def test_a_tick_task_delivered_again_sends_the_calls_its_first_delivery_wrote_and_never_sent(engines: Engines):
    """The soak's seed 104: an agent job `running`, its tick's activity call `ready`, never admitted, no task; the
    dispatcher that committed the tick was killed before it sent the call. The tick's task comes back (it was not
    acknowledged) and finds its request made: it sends the job's ready calls again."""
    rig, model = _rig(engines)
    job_id = rig.service.submit(JOB)
    assert rig.run(limit=1) == []  # tick 0 wrote the call ...
    assert rig.dispatcher.queue.popleft().record is not None  # ... and died before its task was sent
    assert rig.run() == [] and rig.store.record(job_id).status is JobStatus.RUNNING  # stuck without a redelivery
    assert rig.executor.tick(job_id, 0) is None  # the tick's task delivered again
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
    assert rig.runs["weather"] == 1 and len(model.requests) == 2
