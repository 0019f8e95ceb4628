"""Agent jobs end to end: the real `anthropic` SDK against the fake Messages API server, real Redis, real
Celery workers (docs/protocol.md#jobs, docs/protocol.md#what-the-model-is-sent)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def ticks_then_latent(ticks: list[Answer], latent: dict[str, Answer] | None = None):
    """A responder: latent requests answered by the text they hold (`latent` keys), ticks in order."""
    lock = threading.Lock()
    pending = list(ticks)

    def answer(request: RecordedRequest) -> Answer:
        if request.is_latent:
            for needle, reply in (latent or {}).items():
                if needle in request.last_user_text:
                    return reply
            raise AssertionError(f"unexpected latent request: {request.last_user_text[:300]}")
        with lock:
            return pending.pop(0)

    return answer


class AgentHarness(Harness):
    """A harness whose activities log their runs: ("start" | "end", instance, time) and ("context", messages)."""

    def __init__(self, redis_url: str):
        super().__init__(redis_url)
        self.log: list[tuple[Any, ...]] = []


@pytest.fixture
def agent(redis_url: str, anthropic_env: FakeAnthropic) -> Iterator[AgentHarness]:
    harness = AgentHarness(redis_url)
    try:
        yield _agent(harness)
    finally:
        harness.close()


def _agent(harness: AgentHarness) -> AgentHarness:
    harness.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    harness.tool("summarize", params={"text": {}}, output={"type": "string"})

    harness.tool("briefed", params={"note": {"type": "string"}}, output={}, _scopes={"const": ["brief"]})
    harness.tool("recap", params={"note": {"type": "string"}}, output={"type": "string"},
                 _scopes={"const": ["brief"]})

    @harness.activities.register("weather")
    def weather(call):
        harness.log.append(("start", call.get("_instance"), time.monotonic()))
        if call["city"].startswith("slow"):
            time.sleep(0.3)
        harness.log.append(("end", call.get("_instance"), time.monotonic()))
        return {"city": call["city"], "temp_c": 21}

    @harness.activities.register("briefed")
    def briefed(call, tool, context):
        harness.log.append(("context", context.messages))
        return "ok"

    harness.worker(llm="anthropic", concurrency=8)
    return harness


def test_a_multi_tick_agent_job_with_explicit_and_latent_calls_ends_with_a_valid_output(
        agent: AgentHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [
            {"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather", "_reasoningForCall": "need it"},
            {"_tool": "summarize", "text": "†state.weather", "_outputPath": "†state.summary"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "Paris is mild"}}),
    ], latent={"summarize": Answer.solution({"output": "mild, 21 °C"})})
    record = agent.run({"context": [{"type": "text", "role": "system", "text": "Be brief."},
                                    {"type": "text", "text": "How is the weather in Paris?"}],
                        "tools": ["weather", "summarize"], "output": OUTPUT}, timeout=30)
    assert record["status"] == "succeeded", record
    assert record["result"] == {"answer": "Paris is mild"}
    assert record["state"] == {"weather": {"city": "Paris", "temp_c": 21}, "summary": "mild, 21 °C"}
    counts = {"requests": 3, "input_tokens": 300, "output_tokens": 60, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0}
    cost = 3 * (100 * 3 + 20 * 15) / 1e6  # the fake's usage at the default model's price ($3 / $15 per MTok)
    assert record["usage"] == {**counts, "cost_usd": pytest.approx(cost),
                               "by_model": {"claude-sonnet-4-6": {**counts, "cost_usd": pytest.approx(cost)}}}
    ticks = [r for r in anthropic_env.requests if not r.is_latent]
    assert len(ticks) == 2
    first, second = ticks[0].body, ticks[1].body
    for body in (first, second):  # docs/protocol.md#what-the-model-is-sent's request shape
        assert body["stream"] is True
        assert body["tool_choice"] == {"type": "tool", "name": "solution"}
        (tool,) = body["tools"]
        assert tool["name"] == "solution" and tool["eager_input_streaming"] is True
        assert tool["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
        assert body["system"][-1]["text"] == "Be brief."
        assert list(tool["input_schema"]["properties"]) == ["calls", "output"]
    # append-only: the second request's conversation starts with the first one's; the cache breakpoint sits on
    # the last block of each request's conversation
    for body in (first, second):
        assert body["messages"][-1]["content"][-1].pop("cache_control") == {"type": "ephemeral", "ttl": "5m"}
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][len(first["messages"])]["role"] == "assistant"
    assert "Paris" in str(second["messages"][-1])
    events = [e["event"] for _, e in store_of(agent.client()).read_events(record["id"])]
    assert events.count("tick.started") == 2 and "thought" in events


def test_an_invalid_solution_is_sent_back_once_then_corrected(agent: AgentHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [{"_tool": "weather", "_outputPath": "†state.w"}], "output": None}),
        Answer.solution({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.w"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "cold"}}),
    ])
    record = agent.run({"context": [{"type": "text", "text": "Weather in Oslo?"}], "tools": ["weather"],
                        "output": OUTPUT}, timeout=30)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"w": {"city": "Oslo", "temp_c": 21}}
    corrective = anthropic_env.requests[1].body["messages"][-1]["content"][0]
    assert corrective["type"] == "tool_result" and corrective["is_error"] is True
    assert "/calls/0" in str(corrective["content"]) and "city" in str(corrective["content"])


def test_a_twice_invalid_solution_becomes_a_structural_error_the_next_tick_sees(
        agent: AgentHarness, anthropic_env: FakeAnthropic):
    bad = {"calls": [], "output": {"wrong": 1}}
    anthropic_env.responder = ticks_then_latent([
        Answer.solution(bad), Answer.solution(bad), Answer.solution({"calls": [], "output": {"answer": "ok"}})])
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"], "output": OUTPUT},
                       timeout=30)
    assert record["status"] == "succeeded" and record["result"] == {"answer": "ok"}
    third = anthropic_env.requests[2].body["messages"]
    assert "StructuralError" in str(third[-1]) and "/output" in str(third[-1])


def test_max_ticks_exceeded(agent: AgentHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": None})
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"],
                        "options": {"max_ticks": 2}}, timeout=30)
    assert record["status"] == "failed"
    assert record["error"]["type"] == "max_ticks_exceeded"
    assert len(anthropic_env.requests) == 2


def test_a_429_and_an_error_event_mid_stream_are_retried(agent: AgentHarness, anthropic_env: FakeAnthropic):
    anthropic_env.script(
        Answer.http_error(429, headers={"retry-after": "0.2"}),
        Answer.stream_error({"calls": [], "output": {"answer": "x"}}, after=2),
        Answer.solution({"calls": [], "output": {"answer": "done"}}),
    )
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"], "output": OUTPUT},
                       timeout=30)
    assert record["status"] == "succeeded" and record["result"] == {"answer": "done"}
    assert len(anthropic_env.requests) == 3
    assert record["usage"]["requests"] == 1  # only the answered request counts tokens


def test_a_call_starts_while_the_model_is_still_streaming(agent: AgentHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [{"_tool": "weather", "city": "Rome", "_outputPath": "†state.a"},
                                   {"_tool": "weather", "city": "Lima", "_outputPath": "†state.b"}],
                         "output": None}, chunk_size=6, delay_s=0.03),
        Answer.solution({"calls": [], "output": {"answer": "both"}})])
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"], "output": OUTPUT},
                       timeout=30)
    assert record["status"] == "succeeded"
    first_start = min(t for kind, _, t in agent.log if kind == "start")
    stream_end = anthropic_env.exchanges[0].last_chunk_at
    assert stream_end is not None and first_start < stream_end  # dispatched before the answer ended


def test_one_tick_runs_calls_for_20_instances_in_parallel_with_isolated_state(
        agent: AgentHarness, anthropic_env: FakeAnthropic):
    calls = [{"_tool": "weather", "city": f"slow-{i}", "_instance": f"e{i}", "_outputPath": "†state.w"}
             for i in range(20)]
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": calls, "output": None}, chunk_size=400),
        Answer.solution({"calls": [], "output": {"answer": "20"}})])
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"], "output": OUTPUT},
                       timeout=40)
    assert record["status"] == "succeeded"
    assert record["state"] == {}
    assert record["instances"] == {f"e{i}": {"w": {"city": f"slow-{i}", "temp_c": 21}} for i in range(20)}
    running, most = 0, 0
    for kind, _, _ in sorted((e for e in agent.log if e[0] in ("start", "end")), key=lambda e: e[2]):
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most >= 4  # several instances at once (the worker runs 8 threads)


def test_scopes_keep_unscoped_data_from_activities_and_latent_requests(agent: AgentHarness,
                                                                        anthropic_env: FakeAnthropic):
    secret = "card-4242-4242"
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [{"_tool": "briefed", "note": "a", "_outputPath": "†state.a"},
                                   {"_tool": "recap", "note": "b", "_outputPath": "†state.b"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "ok"}})],
        latent={"recap": Answer.solution({"output": "recapped"})})
    record = agent.run({"context": [{"type": "data", "kind": "brief", "data": {"topic": "tides"}},
                                    {"type": "data", "kind": "payment", "data": {"card": secret}},
                                    {"type": "text", "text": "Go"}],
                        "tools": ["briefed", "recap"], "output": OUTPUT}, timeout=30)
    assert record["status"] == "succeeded", record
    (context,) = [e[1] for e in agent.log if e[0] == "context"]
    assert {m.get("kind") for m in context} == {"brief"} and secret not in json.dumps(context)
    (latent,) = [r for r in anthropic_env.requests if r.is_latent]
    assert secret not in json.dumps(latent.body) and "tides" in json.dumps(latent.body)
