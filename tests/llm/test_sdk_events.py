"""How the Anthropic provider reads a stream's events (`agentq/llm/sdk.py`): the real SDK's stream and its
server-sent-event decoder, each event's JSON read once, no SDK model built per event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentq.errors import LLMRetryableError
from agentq.llm.anthropic import AnthropicLLM
from agentq.llm.base import LLMRequest
from agentq.llm.sdk import Fields, events, post
from tests.fake_anthropic import Answer, FakeAnthropic

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}
SOLUTION = {"calls": [{"_tool": "weather", "city": "Paris"}, {"_tool": "mail", "to": "x"}], "output": None}


def request() -> LLMRequest:
    return LLMRequest(model="claude-test", system=("agentq instructions",),
                      messages=({"role": "user", "content": [{"type": "text", "text": "go"}]},),
                      solution_schema=SCHEMA, max_tokens=1024)


@pytest.fixture
def llm(anthropic_env: FakeAnthropic):
    provider = AnthropicLLM()
    yield provider
    provider.close()


def test_a_streamed_answer_builds_no_sdk_model_per_event(llm, anthropic_env, monkeypatch) -> None:
    """The SDK's event models (a pydantic construction per event) were a fifth of the CPU of a streamed answer:
    a 20-piece answer is read with none built, and gives the same answer."""
    import anthropic._base_client
    import anthropic._models

    built: list[dict[str, Any]] = []
    construct = anthropic._models.construct_type
    process = anthropic._base_client.BaseClient._process_response_data

    def counted_construct(**kw: Any) -> Any:
        built.append(kw)
        return construct(**kw)

    def counted_process(self: Any, **kw: Any) -> Any:
        built.append(kw)
        return process(self, **kw)

    monkeypatch.setattr(anthropic._models, "construct_type", counted_construct)
    monkeypatch.setattr(anthropic._base_client.BaseClient, "_process_response_data", counted_process)
    text = json.dumps(SOLUTION, separators=(",", ":"))
    anthropic_env.script(Answer.solution(SOLUTION, chunk_size=-(-len(text) // 20)))
    seen: list[int] = []
    answer = llm.solve(request(), on_call=lambda index, call: seen.append(index))
    assert (answer.solution, answer.raw, seen) == (SOLUTION, text, [0, 1])
    assert answer.usage.input_tokens == 100 and answer.usage.output_tokens == 20
    assert built == []


def test_events_are_the_sdk_stream_s_events_as_json_with_attribute_access(anthropic_env):
    """Every event but the ping, in order, each its JSON; the response is closed at the end."""
    anthropic_env.script(Answer.solution(SOLUTION, chunk_size=30, preamble="Let me see."))
    llm = AnthropicLLM()
    try:
        stream = post(llm.client, {"model": "claude-test", "max_tokens": 10, "stream": True,
                                   "messages": [{"role": "user", "content": "go"}]})
        got = list(events(stream))
    finally:
        llm.close()
    kinds = [e.type for e in got]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"] and "ping" not in kinds
    assert all(isinstance(e, Fields) for e in got)
    tool = got[kinds.index("content_block_start", 3)]
    assert (tool.index, tool.content_block.type, tool.content_block.name) == (1, "tool_use", "solution")
    pieces = [e.delta.partial_json for e in got if e.type == "content_block_delta" and e.index == 1]
    assert json.loads("".join(pieces)) == SOLUTION
    assert got[0].message.usage.input_tokens == 100
    assert stream.response.is_closed


def test_fields_read_as_attributes_and_an_absent_one_is_an_attribute_error():
    event = json.loads('{"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}',
                       object_hook=Fields)
    assert event.delta.stop_reason == "tool_use" and event["delta"]["stop_reason"] == "tool_use"
    assert getattr(event.usage, "cache_creation", None) is None
    with pytest.raises(AttributeError):
        _ = event.missing
    assert json.loads(json.dumps(event)) == event  # still a plain JSON object


def test_an_error_event_raises_what_the_sdk_raises(llm, anthropic_env):
    """An `error` event in a 200 stream is the SDK's APIStatusError, mapped as before (retryable, its type)."""
    anthropic_env.script(Answer.stream_error(SOLUTION, after=2, chunk_size=10))
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    assert caught.value.status == 200 and "overloaded_error" in str(caught.value)
    assert isinstance(caught.value.__cause__, __import__("anthropic").APIStatusError)
