"""A redelivered task of a call whose commit went through while its follow-up did not (the process was killed between
the two): the job goes on as the first delivery would have taken it on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.protocol.status import JobStatus
from agentq.store.state import StateStore
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel

pytestmark = pytest.mark.timeout(20)

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def test_probe(engines: Engines):
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"}], "output": None},
        {"calls": [], "output": {"answer": "mild"}})
    rig = Engine(engines.store, llm=model)
    engines.append(rig)
    rig.activity("weather", lambda call: {"city": call["city"]}, {"city": {"type": "string"}}, required=("city",))
    job_id = rig.service.submit({"context": [{"type": "text", "text": "Weather?"}], "tools": ["weather"],
                                 "output": OUTPUT})
    assert rig.run(limit=1) == []  # tick 0
    task = rig.dispatcher.queue.popleft()
    real = rig.dispatcher.tick
    rig.dispatcher.tick = lambda job_id, n=0: None  # type: ignore[method-assign]
    rig.executor.run_call(job_id, task.record.id, record=task.record)
    rig.dispatcher.tick = real  # type: ignore[method-assign]
    print(rig.store.job_info(job_id))
    print(rig.executor.run_call(job_id, task.record.id, record=task.record))
    print(rig.dispatcher.queue)
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
