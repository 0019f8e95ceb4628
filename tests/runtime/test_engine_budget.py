"""Budgets, cost and the cache TTL on the engine (a `StateStore` on the session's Redis, a scripted model priced by the
shipped table): every model request of a job — its ticks, its latent calls, its module child jobs' requests — goes
through the budget's gate, a request that would cross the budget is never sent and the job fails with `BudgetExceeded`,
and the record's usage carries the cost. (The same on real processes and the fake Messages API: tests/integration.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.engine.modules import ModuleLibrary
from agentq.llm.base import LLMRequest
from agentq.llm.prices import PriceTable
from agentq.protocol.records import ErrorInfo
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel, researcher_library

pytestmark = pytest.mark.timeout(20)

MODEL = "claude-sonnet-4-6"
# the scripted model's usage per request (100 input, 20 output tokens) at $3 / $15 per million tokens
COST_PER_REQUEST = (100 * 3 + 20 * 15) / 1e6
WEATHER = {"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.w"}], "output": None}


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def engine(engines: Engines, model: ScriptedModel, **options) -> Engine:
    made = Engine(options.pop("store", engines.store), llm=model, prices=PriceTable(), **options)
    engines.append(made)
    made.activity("weather", lambda call: {"city": call["city"], "temp_c": 3}, {"city": {"type": "string"}},
                  required=("city",))
    return made


def agent(budget: dict | None = None, **options) -> dict:
    job_options = {"model": MODEL, **options}
    if budget is not None:
        job_options["budget"] = budget
    return {"context": [{"type": "text", "role": "user", "text": "weather?"}], "tools": ["weather"],
            "options": job_options}


def test_an_agent_over_its_request_budget_fails_and_the_model_gets_no_more(engines: Engines):
    model = ScriptedModel.replies(WEATHER, WEATHER, {"calls": [], "output": "cold"})
    rig = engine(engines, model)
    job_id = rig.service.submit(agent({"max_requests": 2}))
    rig.run()
    record = rig.store.record(job_id)
    assert record.status is JobStatus.FAILED
    assert record.error == ErrorInfo("BudgetExceeded", "max_requests: 2 of 2 model requests made or in flight")
    assert len(model.requests) == 2  # the third request was never sent
    assert record.usage["requests"] == 2
    assert record.usage["cost_usd"] == pytest.approx(2 * COST_PER_REQUEST)
    assert record.usage["by_model"] == {MODEL: {
        "requests": 2, "input_tokens": 200, "output_tokens": 40, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "cost_usd": pytest.approx(2 * COST_PER_REQUEST)}}
    [finished] = [e for e in rig.events(job_id) if e["event"] == "job.finished"]
    assert finished["error"]["type"] == "BudgetExceeded"


def test_a_job_within_its_budget_runs_and_its_output_budget_caps_max_tokens(engines: Engines):
    model = ScriptedModel.replies(WEATHER, {"calls": [], "output": "cold"})
    rig = engine(engines, model)
    job_id = rig.service.submit(agent({"max_output_tokens": 1000, "max_cost_usd": 1}))
    rig.run()
    record = rig.store.record(job_id)
    assert (record.status, record.result) == (JobStatus.SUCCEEDED, "cold")
    # the first request may write the whole output budget; the second what the first left (20 were written)
    assert [r.max_tokens for r in model.requests] == [1000, 980]
    assert record.usage["cost_usd"] == pytest.approx(2 * COST_PER_REQUEST)


def test_a_job_without_a_budget_is_not_held_and_still_priced(engines: Engines):
    model = ScriptedModel.replies({"calls": [], "output": "cold"})
    rig = engine(engines, model)
    job_id = rig.service.submit(agent())
    rig.run()
    record = rig.store.record(job_id)
    assert record.status is JobStatus.SUCCEEDED
    assert model.requests[0].max_tokens == Settings().llm_max_tokens
    assert record.usage["cost_usd"] == pytest.approx(COST_PER_REQUEST)


def test_the_default_budget_holds_jobs_that_name_none(engines: Engines):
    model = ScriptedModel.replies(WEATHER, {"calls": [], "output": "cold"})
    rig = engine(engines, model, settings=Settings(default_budget={"max_requests": 1}))
    job_id = rig.service.submit(agent())
    rig.run()
    assert rig.store.record(job_id).error == ErrorInfo("BudgetExceeded",
                                                       "max_requests: 1 of 1 model requests made or in flight")
    assert len(model.requests) == 1
    # a job that names its own budget (`{}`: none) is not held by the default
    other = ScriptedModel.replies(WEATHER, {"calls": [], "output": "cold"})
    free = engine(engines, other, settings=Settings(default_budget={"max_requests": 1}))
    job_id = free.service.submit(agent({}))
    free.run()
    assert free.store.record(job_id).status is JobStatus.SUCCEEDED


def test_an_unpriced_model_has_a_null_cost_and_cannot_be_held_to_a_cost_budget(engines: Engines):
    model = ScriptedModel.replies({"calls": [], "output": "cold"})
    rig = engine(engines, model)
    job_id = rig.service.submit(agent(model="my-own-model"))
    rig.run()
    usage = rig.store.record(job_id).usage
    assert usage["cost_usd"] is None and usage["by_model"]["my-own-model"]["cost_usd"] is None
    assert usage["requests"] == 1

    job_id = rig.service.submit(agent({"max_cost_usd": 5}, model="my-own-model"))
    rig.run()
    record = rig.store.record(job_id)
    assert record.error is not None and record.error.type == "BudgetExceeded"
    assert "'my-own-model' has no price" in record.error.message
    assert len(model.requests) == 1  # the second job's request was not sent


# ---------------------------------------------------------------------------------------- latent calls


def latent_job(budget: dict, count: int = 1) -> dict:
    calls = [{"_tool": "summarize", "text": f"text {i}", "_outputPath": f"†state.s{i}"} for i in range(count)]
    return {"calls": calls, "options": {"model": MODEL, "budget": budget}}


def test_a_latent_call_over_the_budget_is_not_sent_and_fails_the_job(engines: Engines):
    model = ScriptedModel(lambda request: {"output": "short"})
    rig = engine(engines, model)
    rig.tool("summarize", {"text": {"type": "string"}})  # no activity: the model answers it
    job_id = rig.service.submit(latent_job({"max_requests": 2}, count=3))
    rig.run()
    record = rig.store.record(job_id)
    assert record.error == ErrorInfo("BudgetExceeded", "max_requests: 2 of 2 model requests made or in flight")
    assert len(model.requests) == 2
    assert sorted(rig.store.call_statuses(job_id).values()) == [CallStatus.DONE, CallStatus.DONE, CallStatus.FAILED]
    assert record.usage["requests"] == 2 and record.usage["cost_usd"] == pytest.approx(2 * COST_PER_REQUEST)


# ---------------------------------------------------------------------------------------- module calls

@pytest.fixture
def library(tmp_path: Path) -> ModuleLibrary:
    return researcher_library(tmp_path)


def test_a_module_childs_requests_count_against_its_root_jobs_budget(engines: Engines,
                                                                      library: ModuleLibrary):
    model = ScriptedModel.replies(WEATHER, {"calls": [], "output": {"facts": ["cold"]}})
    rig = engine(engines, model, modules=library)
    rig.tool("research", {"question": {"type": "string"}}, _module={"const": "researcher"})
    job_id = rig.service.submit({
        "calls": [{"_tool": "research", "question": "Oslo", "_outputPath": "†state.research"}],
        "options": {"model": MODEL, "budget": {"max_requests": 1}, "cache_ttl": "1h"}})
    rig.run()
    [call_id] = rig.store.call_records(job_id)
    child = rig.store.job_info(f"{call_id}.module")
    assert child.parent is not None and child.parent.root_job == job_id
    assert child.options["budget"] == {"max_requests": 1} and child.options["cache_ttl"] == "1h"
    assert len(model.requests) == 1  # the child's second tick was refused by its root's budget
    assert [r.cache_ttl for r in model.requests] == ["1h"]
    error = ErrorInfo("BudgetExceeded", "max_requests: 1 of 1 model requests made or in flight")
    assert rig.store.record(job_id).error == error and rig.store.record(child.id).error == error
    # the child's usage reached its parent, cost included
    assert rig.store.record(job_id).usage["cost_usd"] == pytest.approx(COST_PER_REQUEST)


def test_the_cache_ttl_reaches_every_request_of_the_job(engines: Engines):
    def answer(request: LLMRequest) -> object:
        return {"output": "short"} if request.purpose == "latent" else {
            "calls": [{"_tool": "summarize", "text": "t", "_outputPath": "†state.s"}] if len(model.requests) == 1
            else [], "output": None if len(model.requests) == 1 else "done"}

    model = ScriptedModel(answer)
    rig = engine(engines, model)
    rig.tool("summarize", {"text": {"type": "string"}})
    job_id = rig.service.submit({**agent(cache_ttl="1h"), "tools": ["summarize"]})
    rig.run()
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED
    assert [(r.purpose, r.cache_ttl) for r in model.requests] == [("tick", "1h"), ("latent", "1h"), ("tick", "1h")]
