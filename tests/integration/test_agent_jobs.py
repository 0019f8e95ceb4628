"""Agent jobs end to end: the real `anthropic` SDK against the fake Messages API server, real Redis, real
Celery workers (SPEC §9, §13)."""

from __future__ import annotations

import threading

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


@pytest.fixture
def agent(harness: Harness, anthropic_env: FakeAnthropic) -> Harness:
    harness.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    harness.tool("summarize", params={"text": {}}, output={"type": "string"})

    @harness.activities.register("weather")
    def weather(call):
        return {"city": call["city"], "temp_c": 21}

    harness.worker(llm="anthropic")
    return harness


def test_a_multi_tick_agent_job_with_explicit_and_latent_calls_ends_with_a_valid_output(
        agent: Harness, anthropic_env: FakeAnthropic):
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
    assert record["usage"] == {"requests": 3, "input_tokens": 300, "output_tokens": 60,
                               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    ticks = [r for r in anthropic_env.requests if not r.is_latent]
    assert len(ticks) == 2
    first, second = ticks[0].body, ticks[1].body
    for body in (first, second):  # SPEC §13's request shape
        assert body["stream"] is True
        assert body["tool_choice"] == {"type": "tool", "name": "solution"}
        (tool,) = body["tools"]
        assert tool["name"] == "solution" and tool["eager_input_streaming"] is True
        assert tool["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["text"] == "Be brief."
        assert list(tool["input_schema"]["properties"]) == ["calls", "output"]
    # append-only: the second request's conversation starts with the first one's
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][len(first["messages"])]["role"] == "assistant"
    assert "Paris" in str(second["messages"][-1])
    events = [e["event"] for _, e in store_of(agent.client()).read_events(record["id"])]
    assert events.count("tick.started") == 2 and "thought" in events


def test_an_invalid_solution_is_sent_back_once_then_corrected(agent: Harness, anthropic_env: FakeAnthropic):
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
        agent: Harness, anthropic_env: FakeAnthropic):
    bad = {"calls": [], "output": {"wrong": 1}}
    anthropic_env.responder = ticks_then_latent([
        Answer.solution(bad), Answer.solution(bad), Answer.solution({"calls": [], "output": {"answer": "ok"}})])
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"], "output": OUTPUT},
                       timeout=30)
    assert record["status"] == "succeeded" and record["result"] == {"answer": "ok"}
    third = anthropic_env.requests[2].body["messages"]
    assert "StructuralError" in str(third[-1]) and "/output" in str(third[-1])


def test_max_ticks_exceeded(agent: Harness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": None})
    record = agent.run({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"],
                        "options": {"max_ticks": 2}}, timeout=30)
    assert record["status"] == "failed"
    assert record["error"]["type"] == "max_ticks_exceeded"
    assert len(anthropic_env.requests) == 2


def test_a_429_and_an_error_event_mid_stream_are_retried(agent: Harness, anthropic_env: FakeAnthropic):
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
