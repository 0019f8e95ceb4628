"""The fake Messages API refuses what the real one refuses: each rule, asked through the real `anthropic` SDK,
raises `anthropic.BadRequestError` (400 `invalid_request_error`) with the real API's message; the same request
made valid is answered. agentq's own request (`request_params`) passes every rule."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest

from agentq.llm.anthropic import request_params
from agentq.llm.base import LLMRequest
from agentq.protocol.compose import compose
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.instructions import system_blocks
from tests.fake_anthropic import Answer, FakeAnthropic, input_schema_refusal, request_refusal, thinking_signature

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array", "maxItems": 0}, "output": {}},
          "required": ["calls", "output"]}
CACHE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral", "ttl": "5m"}


def user(*blocks: dict) -> dict:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict) -> dict:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str, **kw: Any) -> dict:
    return {"type": "text", "text": value, **kw}


def tool_use(tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": "solution", "input": {"calls": [], "output": None}}


def tool_result(tool_id: str) -> dict:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": [text("Your calls ran.")]}


def body(**changes: Any) -> dict:
    """A request agentq could send (one forced tool, a two-tick conversation), with `changes` applied."""
    base: dict[str, Any] = {
        "model": "claude-test", "max_tokens": 256, "stream": True,
        "tools": [{"name": "solution", "description": "Your answer.", "input_schema": copy.deepcopy(SCHEMA),
                   "cache_control": CACHE}],
        "tool_choice": {"type": "tool", "name": "solution"},
        "system": [text("instructions", cache_control=CACHE)],
        "messages": [user(text("the context")), assistant(tool_use("toolu_01")),
                     user(tool_result("toolu_01"), text("what changed", cache_control=CACHE))],
    }
    base.update(changes)
    return base


def with_schema(schema: Any) -> dict:
    request = body()
    request["tools"][0]["input_schema"] = schema
    return request


REFUSED: dict[str, tuple[dict, str]] = {
    "empty anyOf (a module with no tools)": (
        with_schema({"type": "object", "properties": {"calls": {"type": "array", "items": {"anyOf": []}}}}),
        "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12"),
    "empty oneOf": (with_schema({"type": "object", "properties": {"x": {"oneOf": []}}}),
                    "JSON schema is invalid"),
    "empty allOf": (with_schema({"type": "object", "properties": {"x": {"allOf": []}}}),
                    "JSON schema is invalid"),
    "not a 2020-12 schema": (with_schema({"type": "object", "properties": {"x": {"type": "text"}}}),
                             "JSON schema is invalid"),
    "top-level type not object": (with_schema({"type": "array"}),
                                  "tools.0.custom.input_schema.type: Input should be 'object'"),
    "top-level anyOf": (with_schema({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}),
                        "input_schema does not support oneOf, allOf, or anyOf at the top level"),
    "property key the API refuses": (with_schema({"type": "object", "properties": {"a b": {}}}),
                                     "Property keys should match pattern"),
    "empty text block": (body(messages=[user(text("context"), text(""))]),
                         "messages: text content blocks must be non-empty"),
    "empty text in a tool_result": (
        body(messages=[user(text("c")), assistant(tool_use("toolu_01")),
                       user({"type": "tool_result", "tool_use_id": "toolu_01", "content": [text("")]})]),
        "messages: text content blocks must be non-empty"),
    "whitespace-only turn": (body(messages=[user(text("  \n"))]),
                             "messages: text content blocks must contain non-whitespace text"),
    "empty system text": (body(system=[text("")]), "system: text content blocks must be non-empty"),
    "no messages": (body(messages=[]), "messages: at least one message is required"),
    "a turn without content": (body(messages=[user(), assistant(text("ok"))]),
                               "messages.0: all messages must have non-empty content"),
    "first turn is the assistant's": (body(messages=[assistant(text("hello")), user(text("hi"))]),
                                      'messages: first message must use the "user" role'),
    "unknown role": (body(messages=[{"role": "system", "content": "be brief"}]),
                     "messages.0.role: Input should be 'user' or 'assistant'"),
    "final assistant turn ends with whitespace": (body(messages=[user(text("q")), assistant(text("The answer is "))]),
                                                  "messages: final assistant content cannot end with trailing "
                                                  "whitespace"),
    "tool_use not answered": (body(messages=[user(text("c")), assistant(tool_use("toolu_01")), user(text("next"))]),
                              "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
                              "toolu_01"),
    "tool_result answers another id": (
        body(messages=[user(text("c")), assistant(tool_use("toolu_01")), user(tool_result("toolu_02"))]),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01"),
    "tool_result after a text": (
        body(messages=[user(text("c")), assistant(tool_use("toolu_01")), user(text("first"), tool_result("toolu_01"))]),
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_01"),
    "tool_result without a tool_use": (
        body(messages=[user(text("c")), assistant(text("no tool")), user(tool_result("toolu_09"))]),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_09"),
    "tool_use id the API refuses": (
        body(messages=[user(text("c")), assistant(tool_use("call:1")), user(tool_result("call:1"))]),
        "messages.1.content.0.tool_use.id: String should match pattern"),
    "five cache breakpoints": (
        body(system=[text("a", cache_control=CACHE), text("b", cache_control=CACHE), text("c", cache_control=CACHE)]),
        "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    "a cache ttl the API does not know": (
        body(system=[text("instructions", cache_control={"type": "ephemeral", "ttl": "10m"})]),
        "system.0.cache_control.ephemeral.ttl: Input should be '5m' or '1h'"),
    "a cache_control that is not ephemeral": (
        body(system=[text("instructions", cache_control={"type": "persistent"})]),
        "system.0.cache_control: Input tag 'persistent' found using 'type' does not match any of the expected "
        "tags: 'ephemeral'"),
    "a 1h breakpoint after a 5m one": (
        body(system=[text("instructions", cache_control=FIVE)],
             messages=[user(text("the context")), assistant(tool_use("toolu_01")),
                       user(tool_result("toolu_01"), text("what changed", cache_control=HOUR))]),
        "messages.2.content.1.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' "
        "cache_control block. Note that blocks are processed in the following order: `tools`, `system`, "
        "`messages`."),
    "a 1h breakpoint after a default (5m) one": (
        body(system=[text("instructions", cache_control=HOUR)]),  # the tool's breakpoint comes first: 5m
        "system.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m'"),
    "thinking with a forced tool": (body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}),
                                    "Thinking may not be enabled when tool_choice forces tool use."),
    "thinking with tool_choice any": (body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
                                           tool_choice={"type": "any"}),
                                      "Thinking may not be enabled when tool_choice forces tool use."),
    "adaptive thinking with a forced tool": (body(thinking={"type": "adaptive"}),
                                             "Thinking may not be enabled when tool_choice forces tool use."),
    "a thinking budget below 1024": (
        body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1000}, tool_choice={"type": "auto"}),
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"),
    "a thinking budget not below max_tokens": (
        body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048}, tool_choice={"type": "auto"}),
        "`max_tokens` must be greater than `thinking.budget_tokens`"),
    "a changed thinking block": (
        body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}, tool_choice={"type": "auto"},
             messages=[user(text("the context")),
                       assistant({"type": "thinking", "thinking": "I changed this",
                                  "signature": thinking_signature("I thought this")}, tool_use("toolu_01")),
                       user(tool_result("toolu_01"))]),
        "messages.1.content.0: Invalid `signature` in `thinking` block"),
    "a redacted thinking block the API did not send": (
        body(messages=[user(text("the context")),
                       assistant({"type": "redacted_thinking", "data": "bm90IG1pbmU="}, tool_use("toolu_01")),
                       user(tool_result("toolu_01"))]),
        "messages.1.content.0: Invalid `data` in `redacted_thinking` block"),
}


@pytest.fixture
def client(fake_anthropic: FakeAnthropic):
    sdk = anthropic.Anthropic(api_key="sk-ant-fake-key", base_url=fake_anthropic.base_url, max_retries=0)
    yield sdk
    sdk.close()


def send(client: anthropic.Anthropic, request: dict) -> Any:
    """`messages.create` with the request's fields, the stream read to its end."""
    answer = client.messages.create(**request)
    if request.get("stream"):
        for _ in answer:
            pass
    return answer


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_fake_refuses_what_the_real_api_refuses(client, fake_anthropic: FakeAnthropic, case: str):
    request, message = REFUSED[case]
    fake_anthropic.refusals_expected = True
    fake_anthropic.script(Answer.solution({"calls": [], "output": None}))
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(client, request)
    error = caught.value
    assert error.status_code == 400
    assert isinstance(error.body, dict) and error.body["type"] == "error"
    detail = error.body["error"]
    assert detail["type"] == "invalid_request_error" and message in detail["message"]
    assert message in str(error)
    assert error.request_id and error.body["request_id"]  # as the real API's 400s carry one
    assert [m for _, m in fake_anthropic.refusals] == [detail["message"]]
    assert fake_anthropic.pending == 1  # a refused request uses no scripted answer


def test_the_valid_request_they_start_from_is_answered(client, fake_anthropic: FakeAnthropic):
    fake_anthropic.script(Answer.solution({"calls": [], "output": None}))
    send(client, body())
    assert fake_anthropic.refusals == [] and fake_anthropic.pending == 0


@pytest.mark.parametrize("changes", [
    {"messages": [user(text("a")), user(text("b"))]},  # consecutive turns of one role are combined, not refused
    {"messages": [user(text("q")), assistant(text("A prefill"))]},  # a final assistant turn (prefill)
    {"messages": [user(text("  "), text("real text"))]},  # whitespace next to real text
    {"thinking": {"type": "enabled", "budget_tokens": 1024}, "tool_choice": {"type": "auto"}, "max_tokens": 2048},
    {"system": "a plain string system"},
    {"tools": [{**body()["tools"][0], "cache_control": HOUR}], "system": [text("instructions", cache_control=HOUR)],
     "messages": [user(text("q", cache_control=FIVE))]},  # 1h breakpoints before 5m ones
], ids=["consecutive-user-turns", "prefill", "whitespace-next-to-text", "thinking-auto", "string-system",
        "1h-before-5m"])
def test_what_the_real_api_accepts_is_answered(client, fake_anthropic: FakeAnthropic, changes: dict):
    fake_anthropic.script(Answer.solution({"calls": [], "output": None}))
    send(client, body(**changes))
    assert fake_anthropic.refusals == []


def test_the_checks_can_be_turned_off():
    request, _ = REFUSED["empty anyOf (a module with no tools)"]
    with FakeAnthropic(check_requests=False) as fake:
        fake.script(Answer.solution({"calls": [], "output": None}))
        sdk = anthropic.Anthropic(api_key="k", base_url=fake.base_url, max_retries=0)
        send(sdk, request)
        sdk.close()
        assert fake.refusals == [] and fake.pending == 0


@pytest.mark.parametrize("cache_ttl", ["5m", "1h"])
def test_agentqs_requests_pass_every_rule(cache_ttl: str):
    """A second tick of an agent job with no tools, as `request_params` sends it, with either cache TTL."""
    log = [{"type": "text", "role": "user", "text": "What is 2+2?"}]
    exchanges = [Exchange(1, "toolu_01abc", {"calls": [], "output": None})]
    request = LLMRequest(model="claude-test", system=system_blocks(()), messages=tick_messages(log, exchanges),
                         solution_schema=compose([]), max_tokens=256, cache_ttl=cache_ttl)
    assert request_refusal(request_params(request)) is None
    assert input_schema_refusal(compose([])) is None


def test_the_fake_reports_cache_writes_split_by_ttl_as_the_real_api_does(client, fake_anthropic: FakeAnthropic):
    usage = {"input_tokens": 50, "output_tokens": 9, "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 0}
    fake_anthropic.script(Answer.solution({"calls": [], "output": None}, usage=dict(usage)),
                          Answer.solution({"calls": [], "output": None}, usage=dict(usage)))
    hour = body(tools=[{**body()["tools"][0], "cache_control": HOUR}], system=[text("i", cache_control=HOUR)],
                messages=[user(text("q", cache_control=HOUR))], stream=False)
    answered = send(client, hour)
    assert answered.usage.cache_creation.ephemeral_1h_input_tokens == 1200
    assert answered.usage.cache_creation.ephemeral_5m_input_tokens == 0
    answered = send(client, body(stream=False))
    assert answered.usage.cache_creation.ephemeral_5m_input_tokens == 1200


def test_an_over_long_prompt_is_refused_as_the_api_does_and_the_error_carries_the_window():
    """The fake refuses a prompt over its window with the API's status, type and words; the provider's
    `ContextWindowExceeded` carries the prompt's tokens and the window it states."""
    from agentq.errors import ContextWindowExceeded
    from agentq.llm.anthropic import AnthropicLLM
    from agentq.llm.anthropic_errors import refused_window
    from tests.fake_anthropic import FakeAnthropic

    assert refused_window("prompt is too long: 215384 tokens > 200000 maximum") == (215384, 200000)
    assert refused_window("prompt is too long") == (None, None)
    with FakeAnthropic() as fake:
        fake.context_window = 300
        fake.refusals_expected = True
        request = LLMRequest(model="m", system=("s",), messages=({"role": "user", "content": "x" * 4000},),
                             solution_schema={"type": "object", "properties": {"output": {}}}, max_tokens=5)
        with pytest.raises(ContextWindowExceeded) as caught:
            AnthropicLLM(api_key="k", base_url=fake.base_url).solve(request)
        (refused, message), = fake.refusals
    tokens = len(refused.raw) // 4
    assert message == f"prompt is too long: {tokens} tokens > 300 maximum"
    assert caught.value.window == 300 and caught.value.prompt_tokens == tokens
    assert "400 invalid_request_error" in str(caught.value)
