"""Model per tool (docs/rate-limits.md, `x-model`): a tool's latent calls and its module's ticks go to the model it
names, and each request is priced as its own model's; a tool naming a model the price table does not know is refused at
submission with its pointer. The real `anthropic` SDK against the fake Messages API, real Redis, a real Celery
worker."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agentq.errors import JobValidationError
from agentq.llm.base import Usage
from agentq.llm.prices import SHIPPED
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of, tool_schema

pytestmark = pytest.mark.timeout(90)

MAIN, SMALL = "claude-sonnet-4-6", "claude-haiku-4-5"
TICK_USAGE = {"input_tokens": 1000, "output_tokens": 100, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0}
SMALL_USAGE = {"input_tokens": 3000, "output_tokens": 400, "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0}


def cost(model: str, usage: dict, requests: int = 1) -> float:
    return requests * SHIPPED[model].cost_nanousd(Usage(requests=1, **usage), "5m") / 1e9


@pytest.fixture
def two_models(harness: Harness, anthropic_env: FakeAnthropic, tmp_path: Path) -> Harness:
    (tmp_path / "digest.json").write_text(json.dumps({
        "context": [{"type": "text", "role": "system", "text": "You digest a text."}],
        "tools": [], "output": {"type": "string"}}), encoding="utf-8")
    harness.tools.register("summarize", {**tool_schema("summarize", params={"text": {"type": "string"}},
                                                       output={"type": "string"}, required=["text"]),
                                         "x-model": SMALL})  # no activity: a latent call, on the small model
    harness.tools.register("digest", {**tool_schema("digest", params={"text": {"type": "string"}},
                                                    output={"type": "string"}, _module={"const": "digest"}),
                                      "x-model": SMALL})  # a module: its ticks on the small model
    harness.worker(llm="anthropic", model=MAIN, module_dirs=[tmp_path])
    return harness


def test_a_tools_latent_calls_and_module_ticks_go_to_its_model_each_priced_as_its_own(
        two_models: Harness, anthropic_env: FakeAnthropic):
    ticks = [Answer.solution({"calls": [
        {"_tool": "summarize", "text": "a long text", "_outputPath": "†state.summary"},
        {"_tool": "digest", "text": "another text", "_outputPath": "†state.digest"}], "output": None},
        usage=dict(TICK_USAGE)),
        Answer.solution({"calls": [], "output": "done"}, usage=dict(TICK_USAGE))]
    lock = threading.Lock()

    def answer(request: RecordedRequest) -> Answer:
        system = " ".join(block["text"] for block in request.body.get("system") or [])
        if request.is_latent:
            return Answer.solution({"output": "short"}, usage=dict(SMALL_USAGE))
        if "You digest a text." in system:
            return Answer.solution({"calls": [], "output": "digested"}, usage=dict(SMALL_USAGE))
        with lock:
            return ticks.pop(0)

    anthropic_env.responder = answer
    record = two_models.run({"context": [{"type": "text", "text": "Summarize and digest."}],
                             "tools": ["summarize", "digest"]}, timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"summary": "short", "digest": "digested"}
    models = sorted((r.body["model"], "latent" if r.is_latent else "tick") for r in anthropic_env.requests)
    assert models == sorted([(MAIN, "tick"), (MAIN, "tick"), (SMALL, "latent"), (SMALL, "tick")])  # the module's tick
    usage = record["usage"]
    assert usage["by_model"][MAIN]["requests"] == 2 and usage["by_model"][SMALL]["requests"] == 2
    assert usage["by_model"][MAIN]["cost_usd"] == pytest.approx(cost(MAIN, TICK_USAGE, 2))
    assert usage["by_model"][SMALL]["cost_usd"] == pytest.approx(cost(SMALL, SMALL_USAGE, 2))
    assert cost(SMALL, SMALL_USAGE) != pytest.approx(cost(MAIN, SMALL_USAGE))  # priced as haiku, not sonnet
    assert usage["cost_usd"] == pytest.approx(cost(MAIN, TICK_USAGE, 2) + cost(SMALL, SMALL_USAGE, 2))


def test_an_unknown_x_model_is_refused_at_submission_with_its_pointer_and_nothing_written(
        two_models: Harness, anthropic_env: FakeAnthropic):
    two_models.tools.register("translate", {**tool_schema("translate", output={"type": "string"}),
                                            "x-model": "claude-nonexistent-9"})
    inline = {**tool_schema("inline", output={"type": "string"}), "x-model": 42}
    client = two_models.client(tools=two_models.tools)
    before = store_of(client).recent_jobs(100)
    with pytest.raises(JobValidationError) as raised:
        client.submit({"context": [{"type": "text", "text": "Go."}],
                       "tools": ["summarize", "translate", inline], "options": {"model": MAIN}})
    problems = {p.pointer: p.message for p in raised.value.problems}
    assert set(problems) == {"/tools/1", "/tools/2/x-model"}
    assert "'claude-nonexistent-9' is not a model the price table knows" in problems["/tools/1"]
    assert "tool 'translate'" in problems["/tools/1"]
    assert "x-model must be a model name, got 42" in problems["/tools/2/x-model"]
    assert store_of(client).recent_jobs(100) == before  # nothing written
    assert anthropic_env.requests == []
