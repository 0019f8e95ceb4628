"""The engine on a `StateStore` (the session's private Redis): the executor's paths (claim → run → commit, retries, a
committed failure, running ahead and settling), the agent loop's ticks against a scripted model, and module calls
delegated to child jobs, through the entry points the Celery tasks call (`JobService.submit`, `Executor.run_call`,
`Executor.tick`). No Celery: a queue stands in for the broker (the same paths on real workers live in
tests/integration)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.engine.modules import ModuleLibrary
from agentq.engine.tick_end import SUPERSEDED_RETRY_S
from agentq.errors import LLMError, LLMRetryableError
from agentq.llm.base import LLMRequest
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.records import ErrorInfo
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.replies import TickClaimed
from agentq.store.state import StateStore
from tests.runtime.conftest import expire_now
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel, researcher_library

pytestmark = pytest.mark.timeout(20)

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def _counted(step: Callable[..., Any], name: str, steps: list[str]) -> Callable[..., Any]:
    """`step`, its name appended to `steps` at each call."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        steps.append(name)
        return step(*args, **kwargs)

    return counted


def engine(engines: Engines, **options) -> Engine:
    made = Engine(options.pop("store", engines.store), **options)
    engines.append(made)
    made.activity("weather", lambda call: {"city": call["city"], "temp_c": 21}, {"city": {"type": "string"}},
                  required=("city",))
    return made


# ------------------------------------------------------------------------------------------ executor


def test_a_call_is_claimed_run_and_committed_and_its_job_finalized(engines: Engines):
    rig = engine(engines)
    job_id = rig.service.submit({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.w"}]})
    assert rig.run() == ["done"]
    record = rig.store.record(job_id)
    assert (record.status, record.state) == (JobStatus.SUCCEEDED, {"w": {"city": "Oslo", "temp_c": 21}})
    assert rig.names(job_id) == ["job.queued", "job.started", "call.started", "call.finished", "job.finished"]
    table, sent = rig.store.call_table(job_id), rig.dispatcher.sent[0].record
    assert table is not None and sent is not None and table.attempts == {sent.id: 1}
    assert rig.run() == []  # nothing left


def test_retries_back_off_then_a_failure_is_committed_and_fails_the_job(engines: Engines):
    rig = engine(engines)

    def down(call: dict) -> None:
        raise ConnectionError("still down")

    rig.activity("flaky", down, retries=2, retry_backoff=0.5)
    job_id = rig.service.submit({"calls": [{"_tool": "flaky", "_outputPath": "†state.r"}]})
    assert rig.run() == ["retry", "retry", "failed"]
    delays = [o.retry_in or 0.0 for _, o in rig.outcomes if o.status == "retry"]  # None fails the bounds
    assert 0.25 <= delays[0] <= 0.5 and 0.5 <= delays[1] <= 1.0  # backoff * 2**(attempt-1), jittered
    events = rig.events(job_id)
    assert [e["attempt"] for e in events if e["event"] == "call.retrying"] == [1, 2]
    [failed] = [e for e in events if e["event"] == "call.finished"]
    assert failed["status"] == "failed" and failed["error"] == {"type": "ConnectionError", "message": "still down"}
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None and "still down" in record.error.message
    assert set(rig.store.call_statuses(job_id).values()) == {CallStatus.FAILED}


def test_an_idempotent_activity_runs_ahead_and_settles_in_one_step(engines: Engines):
    rig = engine(engines, signed=True)
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    steps: list[str] = []
    for name in ("claim", "settle"):
        step = getattr(rig.store, name)
        setattr(rig.store, name, _counted(step, name, steps))
    job_id = rig.service.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"}
                                           for i in range(3)]})
    assert rig.run() == ["done"] * 3
    assert steps == ["claim", "settle", "settle"]  # the first delivery had no copy of the tool yet
    assert rig.store.record(job_id).state == {"r0": 0, "r1": 1, "r2": 2}
    assert rig.runs["noop"] == 3
    assert set(rig.store.call_table(job_id).attempts.values()) == {1}
    assert rig.names(job_id).count("job.started") == 1


# ---------------------------------------------------------------------------------------- agent loop


def agent_job(*, tools: list[str] = ["weather"], **options) -> dict:  # noqa: B006 - never changed
    return {"context": [{"type": "text", "role": "system", "text": "Be brief."},
                        {"type": "text", "text": "How is the weather in Paris?"}],
            "tools": tools, "output": OUTPUT, "options": options}


def test_an_agent_job_ticks_runs_its_calls_and_ends_with_the_models_output(engines: Engines):
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"}], "output": None},
        {"calls": [], "output": {"answer": "mild"}})
    rig = engine(engines, llm=model)
    job_id = rig.service.submit(agent_job())
    assert rig.run() == ["done"]
    record = rig.store.record(job_id)
    assert (record.status, record.result) == (JobStatus.SUCCEEDED, {"answer": "mild"})
    assert record.state == {"weather": {"city": "Paris", "temp_c": 21}}
    assert record.usage["requests"] == 2 and record.usage["input_tokens"] == 200
    assert [(t.job_id, t.n) for t in rig.dispatcher.sent if t.record is None] == [(job_id, 0), (job_id, 1)]
    first, second = model.requests
    assert first.system[-1] == "Be brief." and first.purpose == "tick"
    assert second.messages[: len(first.messages)] == first.messages  # append-only
    assert "temp_c" in json.dumps(second.messages[len(first.messages):])
    info = rig.store.job_info(job_id)
    assert (info.ticks, info.exchanges, info.ticking) == (2, 2, False)
    assert rig.names(job_id, {"tick.started", "tick.finished", "call.finished", "job.finished"}) == [
        "tick.started", "tick.finished", "call.finished", "tick.started", "tick.finished", "job.finished"]


def test_an_invalid_solution_is_sent_back_once_then_corrected(engines: Engines):
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "_outputPath": "†state.w"}], "output": None},  # no city
        {"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.w"}], "output": None},
        {"calls": [], "output": {"answer": "cold"}})
    rig = engine(engines, llm=model)
    job_id = rig.service.submit(agent_job())
    rig.run()
    record = rig.store.record(job_id)
    assert (record.status, record.state) == (JobStatus.SUCCEEDED, {"w": {"city": "Oslo", "temp_c": 21}})
    corrective = model.requests[1].messages[-1]["content"][0]
    assert corrective["type"] == "tool_result" and corrective["is_error"] is True
    assert "/calls/0" in json.dumps(corrective["content"])
    assert rig.store.job_info(job_id).ticks == 2  # the answer sent back does not count as a tick
    assert rig.runs["weather"] == 1


def test_a_tick_whose_lease_lapsed_during_its_request_asks_again_instead_of_leaving_the_job_ticking(
        engines: Engines):
    """Its renewals came too late (a paused or overloaded process) and nobody took the tick over: its answer is
    not kept (another attempt may hold the tick by now); the request is made again, and the job goes on."""
    rig: Engine

    def answer(request: LLMRequest) -> dict:
        if len(model.requests) == 1:
            expire_now(rig.store, rig.store.keys(job_id).tick_lease)  # its lease (30 s) ran out, no renewal came
        return {"calls": [], "output": {"answer": "mild"}}

    model = ScriptedModel(answer)
    rig = engine(engines, llm=model)
    job_id = rig.service.submit(agent_job())
    rig.run()
    assert rig.waits == [SUPERSEDED_RETRY_S]
    assert len(model.requests) == 2 and model.requests[1].messages == model.requests[0].messages
    record = rig.store.record(job_id)
    assert (record.status, record.result, record.usage["requests"]) == (JobStatus.SUCCEEDED, {"answer": "mild"}, 1)
    assert rig.store.job_info(job_id).ticking is False


def test_a_tick_reads_only_what_came_since_the_last_tick_of_its_process(engines: Engines,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """The conversation grows by a few turns a tick: a process keeps it, reads only the new log messages and
    exchanges (in the tick's claim: no read of its own), and sends the same request it would have built from
    everything."""
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"}], "output": None},
        {"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.oslo"}], "output": None},
        {"calls": [], "output": {"answer": "mild"}})
    rig = engine(engines, llm=model)
    reads: list[tuple[int, int, int, int]] = []
    separate: list[str] = []  # reads of a tick's inputs apart from its claim
    original, agent_inputs = rig.store.begin_tick, rig.store.agent_inputs

    def begin_tick(job_id: str, **kwargs):
        claim = original(job_id, **kwargs)
        if isinstance(claim, TickClaimed):
            assert claim.inputs is not None
            log_from, exchanges_from = kwargs["read_from"]
            reads.append((log_from, exchanges_from, len(claim.inputs.log), len(claim.inputs.exchanges)))
        return claim

    def read_apart(job_id: str, **kwargs):
        separate.append(job_id)
        return agent_inputs(job_id, **kwargs)

    monkeypatch.setattr(rig.store, "begin_tick", begin_tick)
    monkeypatch.setattr(rig.store, "agent_inputs", read_apart)
    job_id = rig.service.submit(agent_job())
    rig.run()
    assert rig.store.record(job_id).result == {"answer": "mild"}
    assert reads == [(0, 0, 2, 0), (2, 0, 1, 1), (3, 1, 1, 1)]  # the context; then one exchange and one result each
    assert separate == []
    keys = rig.store.keys(job_id)
    log = [json.loads(m) for m in rig.store.redis.lrange(keys.log, 0, -1)]
    exchanges = [Exchange.from_dict(json.loads(e)) for e in rig.store.redis.lrange(keys.exchanges, 0, -1)]
    assert model.requests[2].messages == tick_messages(log, exchanges[:2])


def test_an_agent_out_of_ticks_fails(engines: Engines):
    model = ScriptedModel(lambda request: {"calls": [], "output": None})
    rig = engine(engines, llm=model)
    job_id = rig.service.submit(agent_job(max_ticks=2))
    rig.run()
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None and record.error.type == "max_ticks_exceeded"
    assert len(model.requests) == 2


def test_a_transient_model_failure_is_retried_and_a_terminal_one_fails_the_job(engines: Engines):
    model = ScriptedModel.replies(LLMRetryableError("overloaded", retry_after_s=0.5),
                                  {"calls": [], "output": {"answer": "ok"}}, LLMError("bad request"))
    rig = engine(engines, llm=model)
    retried = rig.service.submit(agent_job())
    rig.run()
    assert rig.waits == [0.5]  # the tick task asked to come back after the provider's retry-after
    assert rig.store.record(retried).result == {"answer": "ok"}
    failed = rig.service.submit(agent_job())
    rig.run()
    record = rig.store.record(failed)
    assert (record.status, record.error) == (JobStatus.FAILED, ErrorInfo("LLMError", "bad request"))


def test_an_agent_job_without_a_model_fails_clearly(engines: Engines):
    rig = engine(engines)
    job_id = rig.service.submit(agent_job())
    rig.run()
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None and record.error.type == "LLMNotConfigured"


def test_an_agents_call_held_for_approval_runs_once_approved(engines: Engines):
    model = ScriptedModel.replies(
        {"calls": [{"_tool": "weather", "city": "Rome", "_outputPath": "†state.w"}], "output": None},
        {"calls": [], "output": {"answer": "warm"}})
    rig = engine(engines, llm=model)
    job_id = rig.service.submit(agent_job(approval=["weather"]))
    assert rig.run() == []
    [call_id] = rig.store.call_records(job_id)
    assert rig.store.job_status(job_id) is JobStatus.AWAITING_APPROVAL
    rig.service.approve(job_id, call_id)
    assert rig.run() == ["done"]
    assert rig.store.record(job_id).result == {"answer": "warm"}


# ---------------------------------------------------------------------------------------- delegation

@pytest.fixture
def library(tmp_path: Path) -> ModuleLibrary:
    return researcher_library(tmp_path)


def researcher(*child_answers: object) -> ScriptedModel:
    """The model of the researcher's child jobs (a plan parent asks the model nothing itself)."""
    answers = list(child_answers)

    def answer(request: LLMRequest) -> object:
        assert "You are the Researcher." in request.system and request.purpose == "module"
        return answers.pop(0)

    return ScriptedModel(answer)


def delegating(engines: Engines, library: ModuleLibrary, model: ScriptedModel, **settings) -> Engine:
    rig = engine(engines, llm=model, modules=library, settings=Settings(**settings))
    rig.tool("research", {"question": {"type": "string"}}, _module={"const": "researcher"})
    return rig


PARENT = {"context": [{"type": "data", "kind": "brief", "data": {"topic": "lighthouses"}}],
          "calls": [{"_tool": "research", "question": "the lighthouse", "_outputPath": "†state.research"}]}


def assert_relayed(events: list[dict], child_id: str, module: str) -> None:
    """The child's events in its parent's stream: named after the child and its module, its own start and end
    left out."""
    relayed = [e for e in events if e.get("relayed_from")]
    assert {e["relayed_from"] for e in relayed} == {child_id}
    assert {e["part"]["source"] for e in relayed if e.get("part")} == {module}
    assert {e["event"] for e in relayed} == {"tick.started", "tick.finished", "call.started", "call.finished",
                                            "part"}


def test_a_module_call_runs_a_child_job_and_resumes_its_parent(engines: Engines, library: ModuleLibrary):
    model = researcher(
        {"calls": [{"_tool": "weather", "city": "Brest", "_outputPath": "†state.w"}], "output": None},
        {"calls": [], "output": {"facts": ["windy"]}})
    rig = delegating(engines, library, model)
    job_id = rig.service.submit(PARENT)
    assert rig.run(limit=1) == ["delegated"]  # the parent's module call submitted its child job
    [call_id] = rig.store.call_records(job_id)
    assert rig.store.call_statuses(job_id) == {call_id: CallStatus.RUNNING}
    # a redelivery of the module call finds it held by its child job: nothing runs or is submitted twice
    assert rig.executor.run_call(job_id, call_id).status == "leased"
    assert rig.run() == ["done"]  # the child's call
    record = rig.store.record(job_id)
    assert (record.status, record.state) == (JobStatus.SUCCEEDED, {"research": {"facts": ["windy"]}})
    assert record.usage["requests"] == 2  # the child's requests are counted on the parent
    child = rig.store.job_info(f"{call_id}.module")
    assert child.status is JobStatus.SUCCEEDED
    assert child.parent is not None
    assert (child.parent.job, child.parent.call, child.parent.module) == (
        job_id, call_id, "researcher")
    assert "the lighthouse" in json.dumps(model.requests[0].messages)  # the call's parameters are the input
    assert_relayed(rig.events(job_id), child.id, "researcher")
    assert rig.names(job_id)[-2:] == ["call.finished", "job.finished"]
    assert [t.job_id for t in rig.dispatcher.sent if t.record is None] == [child.id, child.id]  # its two ticks


def test_a_failed_child_job_fails_its_parents_call(engines: Engines, library: ModuleLibrary):
    rig = delegating(engines, library, researcher(LLMError("refused")))
    job_id = rig.service.submit(PARENT)
    assert rig.run() == ["delegated"]
    [call_id] = rig.store.call_records(job_id)
    assert rig.store.job_status(f"{call_id}.module") is JobStatus.FAILED
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED and record.error is not None and "refused" in record.error.message
    [finished] = [e for e in rig.events(job_id) if e["event"] == "call.finished" and not e.get("relayed_from")]
    assert finished["status"] == "failed" and finished["error"]["type"] == "LLMError"


def test_a_module_call_in_a_process_without_modules_fails(engines: Engines, library: ModuleLibrary):
    rig = engine(engines, llm=researcher())
    rig.tool("research", {"question": {"type": "string"}}, _module={"const": "researcher"})
    job_id = rig.service.submit(PARENT)
    assert rig.run() == ["failed"]
    record = rig.store.record(job_id)
    assert (record.status is JobStatus.FAILED and record.error is not None
            and "ModulesNotConfigured" in record.error.message)
