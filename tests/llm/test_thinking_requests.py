"""The request a thinking job sends (docs/rate-limits.md), checked against the fake's copy of the API's rules, and the
conversation an exchange with thinking, a cut answer or no solution becomes (pure)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentq.errors import ContextWindowExceeded, ModelRefused, Problem, UnknownStopReason
from agentq.llm import anthropic_stream
from agentq.llm.anthropic import request_params
from agentq.llm.anthropic_stream import read_answer
from agentq.llm.base import LLMRequest
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.thinking import fitted, thinking_param
from agentq.protocol.transcript import Transcript
from tests.fake_anthropic import request_refusal, thinking_signature

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}
CONTEXT = [{"type": "text", "text": "Do it.", "role": "user"}]


def request(thinking, max_tokens: int = 8192) -> LLMRequest:
    return LLMRequest(model="claude-sonnet-4-6", system=("instructions",),
                      messages=({"role": "user", "content": [{"type": "text", "text": "go"}]},),
                      solution_schema=SCHEMA, max_tokens=max_tokens, thinking=thinking)


def test_thinking_offers_the_tool_instead_of_forcing_it_and_the_api_accepts_it():
    body = request_params(request(thinking_param({"budget_tokens": 2048})))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["tool_choice"] == {"type": "auto"}
    assert request_refusal(body) is None
    adaptive = request_params(request(thinking_param("adaptive")))
    assert adaptive["thinking"] == {"type": "adaptive"} and request_refusal(adaptive) is None
    plain = request_params(request(None))
    assert "thinking" not in plain and plain["tool_choice"] == {"type": "tool", "name": "solution"}
    forced = {**body, "tool_choice": {"type": "tool", "name": "solution"}}  # what agentq must never send
    assert request_refusal(forced) == "Thinking may not be enabled when tool_choice forces tool use."


def test_a_budget_that_lowered_max_tokens_cuts_the_thinking_budget_to_fit_or_leaves_thinking_off():
    thinking = thinking_param({"budget_tokens": 6000})
    assert fitted(thinking, 3000) == {"type": "enabled", "budget_tokens": 2999}
    assert fitted(thinking, 1024) is None
    assert fitted({"type": "adaptive"}, 100) == {"type": "adaptive"}
    lowered = request_params(request(thinking, max_tokens=3000))
    assert lowered["thinking"]["budget_tokens"] == 2999 and request_refusal(lowered) is None
    off = request_params(request(thinking, max_tokens=1000))
    assert "thinking" not in off and off["tool_choice"]["type"] == "tool" and request_refusal(off) is None


BLOCKS = ({"type": "thinking", "thinking": "Step one first.", "signature": thinking_signature("Step one first.")},)


def exchanges() -> list[Exchange]:
    return [
        Exchange(1, "toolu_1", {"calls": [{"_tool": "step", "n": 0}], "output": None}, blocks=BLOCKS,
                 truncated=True),
        Exchange(1, "", None, (Problem("", "you answered without calling the `solution` tool"),), text="Hmm."),
        Exchange(1, "toolu_3", {"calls": [], "output": None}, blocks=BLOCKS),
    ]


def test_exchanges_with_thinking_a_cut_answer_and_no_solution_make_a_conversation_the_api_accepts():
    turns = tick_messages(CONTEXT, exchanges())
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert turns[1]["content"][0] == BLOCKS[0] and turns[1]["content"][1]["type"] == "tool_use"
    assert "cut off at the output token limit (max_tokens) after 1 complete call(s)" in json.dumps(turns[2])
    assert turns[3]["content"] == [{"type": "text", "text": "Hmm."}]
    assert turns[4]["content"][0]["type"] == "text" and "without calling" in turns[4]["content"][0]["text"]
    body = request_params(LLMRequest(model="m", system=("s",), messages=turns, solution_schema=SCHEMA,
                                     max_tokens=8192, thinking=thinking_param({"budget_tokens": 2048})))
    assert request_refusal(body) is None
    changed = json.loads(json.dumps(body).replace("Step one first.", "Step two first."))
    assert "Invalid `signature` in `thinking` block" in str(request_refusal(changed))


def test_the_stored_exchange_round_trips_and_the_transcript_agrees_with_tick_messages():
    stored = [Exchange.from_dict(json.loads(json.dumps(e.to_dict()))) for e in exchanges()]
    assert stored == exchanges()
    assert "blocks" not in Exchange(1, "t", {}).to_dict()  # the stored form of a plain exchange is unchanged
    transcript = Transcript(max_input_tokens=200_000)
    transcript.grow(CONTEXT, stored)
    assert transcript.turns == tick_messages(CONTEXT, stored)


def events(*items: dict) -> list:
    """SDK-like stream events (attribute access) from dicts."""
    def wrap(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{k: wrap(v) for k, v in value.items()})
        return value
    return [wrap(item) for item in items]


def stream(*middle: dict, stop_reason: str) -> list:
    return events({"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}}, *middle,
                  {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 5}},
                  {"type": "message_stop"})


def thinking_block(index: int, text: str, signature: str | None) -> list[dict]:
    parts = [{"type": "content_block_start", "index": index,
              "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
             {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": text}}]
    if signature is not None:
        parts.append({"type": "content_block_delta", "index": index,
                      "delta": {"type": "signature_delta", "signature": signature}})
    return parts


@pytest.fixture
def plain_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_answer` takes a list of events as the stream (no HTTP response under it)."""
    monkeypatch.setattr(anthropic_stream, "_events", iter)


@pytest.mark.usefixtures("plain_events")
def test_the_stream_reader_keeps_signed_thinking_and_leaves_out_a_block_cut_before_its_signature():
    answer = read_answer(stream(*thinking_block(0, "First.", "sig1"), *thinking_block(1, "Then", None),
                                stop_reason="max_tokens"), None)
    assert answer.truncated and answer.tool_use_id == "" and answer.solution is None
    assert answer.blocks == ({"type": "thinking", "thinking": "First.", "signature": "sig1"},)
    assert answer.thinking == ("First.",) and answer.usage.output_tokens == 5


@pytest.mark.usefixtures("plain_events")
def test_a_refusal_and_an_unknown_stop_reason_raise_with_the_text_and_the_reason():
    text = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I won't."}}]
    with pytest.raises(ModelRefused, match=r"^I won't\.$") as refused:
        read_answer(stream(*text, stop_reason="refusal"), None)
    assert refused.value.usage.requests == 1
    with pytest.raises(UnknownStopReason, match="'pause_turn'"):
        read_answer(stream(*text, stop_reason="pause_turn"), None)
    with pytest.raises(ContextWindowExceeded):
        read_answer(stream(*text, stop_reason="model_context_window_exceeded"), None)
