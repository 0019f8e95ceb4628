"""The Anthropic provider: the real SDK against the fake Messages API server (tests/fake_anthropic.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from agentq.errors import LLMError, LLMRetryableError
from agentq.llm.anthropic import AnthropicLLM, parse_retry_after
from agentq.llm.base import LLMRequest, Usage
from agentq.protocol.instructions import SOLUTION_TOOL_DESCRIPTION
from tests.fake_anthropic import Answer, FakeAnthropic

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}
SOLUTION: dict[str, Any] = {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.w"},
                      {"_tool": "mail", "to": "†state.w.email", "note": "a } in a string"}],
            "output": None}


def request(**kw) -> LLMRequest:
    base: dict[str, Any] = dict(model="claude-test", system=("agentq instructions", "the job's system text"),
                messages=({"role": "user", "content": [{"type": "text", "text": "## Data: ¶input\n{}"}]},),
                solution_schema=SCHEMA, max_tokens=1024)
    base.update(kw)
    return LLMRequest(**base)


@pytest.fixture
def llm(anthropic_env: FakeAnthropic):
    provider = AnthropicLLM()  # reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL as the SDK does
    yield provider
    provider.close()


def test_request_on_the_wire_is_exactly_spec_13(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION))
    llm.solve(request())
    [sent] = anthropic_env.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["authorization"] == "Bearer sk-ant-fake-key"
    body = sent.body
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 1024
    assert body["stream"] is True
    assert body["tool_choice"] == {"type": "tool", "name": "solution"}
    assert body["tools"] == [{"name": "solution", "description": SOLUTION_TOOL_DESCRIPTION, "input_schema": SCHEMA,
                              "eager_input_streaming": True, "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
    assert body["system"] == [
        {"type": "text", "text": "agentq instructions"},
        {"type": "text", "text": "the job's system text", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
    ]
    # the last block of the conversation is the third cache breakpoint: the next tick's request repeats it all
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "## Data: ¶input\n{}",
                                                              "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]
    assert set(body) == {"model", "max_tokens", "messages", "tools", "tool_choice", "stream", "system"}


def test_answer_carries_solution_raw_text_id_usage_and_stop_reason(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION, tool_use_id="toolu_abc", usage={
        "input_tokens": 1200, "output_tokens": 345, "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 4000}))
    answer = llm.solve(request())
    assert answer.solution == SOLUTION
    assert answer.raw == Answer.solution(SOLUTION).text_of_solution
    assert answer.tool_use_id == "toolu_abc"
    assert answer.stop_reason == "tool_use"
    assert answer.usage == Usage(requests=1, input_tokens=1200, output_tokens=345,
                                 cache_creation_input_tokens=1000, cache_read_input_tokens=4000,
                                 ephemeral_5m_input_tokens=1000)  # the API's split by TTL


def test_a_1h_cache_ttl_is_on_every_breakpoint_and_its_writes_are_read_apart(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION, usage={"input_tokens": 30, "output_tokens": 12,
                                                          "cache_creation_input_tokens": 2048,
                                                          "cache_read_input_tokens": 0}))
    answer = llm.solve(request(cache_ttl="1h"))
    body = anthropic_env.requests[0].body
    hour = {"type": "ephemeral", "ttl": "1h"}
    breakpoints = [body["tools"][0]["cache_control"], body["system"][-1]["cache_control"],
                   body["messages"][-1]["content"][-1]["cache_control"]]
    assert breakpoints == [hour, hour, hour]
    assert answer.usage == Usage(requests=1, input_tokens=30, output_tokens=12, cache_creation_input_tokens=2048,
                                 ephemeral_1h_input_tokens=2048)


def test_calls_are_reported_while_the_stream_is_still_going(llm, anthropic_env) -> None:
    anthropic_env.script(Answer.solution(SOLUTION, chunk_size=4, delay_s=0.03))
    seen: list[tuple[int, dict, float]] = []
    answer = llm.solve(request(), on_call=lambda i, call: seen.append((i, call, time.monotonic())))
    assert [(i, c) for i, c, _ in seen] == [(0, SOLUTION["calls"][0]), (1, SOLUTION["calls"][1])]
    exchange = anthropic_env.exchanges[0]
    assert seen[0][2] < exchange.last_chunk_at  # call 0 was known before the server sent its last piece
    assert seen[1][2] < exchange.last_chunk_at  # `], "output": null}` was still to come
    assert answer.solution == SOLUTION


def test_a_text_block_before_the_tool_use_is_ignored(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION, preamble="Let me think."))
    seen = []
    answer = llm.solve(request(), on_call=lambda i, c: seen.append(i))
    assert answer.solution == SOLUTION and seen == [0, 1]


def test_invalid_json_gives_solution_none_and_the_raw_text(llm, anthropic_env):
    text = '{"calls": [{"_tool": "a"}, {"_tool": "b", "x": }], "output": null'
    anthropic_env.script(Answer.raw(text, chunk_size=4, stop_reason="max_tokens"))
    seen = []
    answer = llm.solve(request(), on_call=lambda i, c: seen.append((i, c)))
    assert answer.solution is None
    assert answer.raw == text
    assert answer.stop_reason == "max_tokens"
    assert seen == [(0, {"_tool": "a"})]


def test_429_with_retry_after_is_retryable(llm, anthropic_env):
    anthropic_env.script(Answer.http_error(429, headers={"retry-after": "7"}))
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    assert caught.value.retry_after_s == 7.0
    assert caught.value.status == 429
    assert "429" in str(caught.value) and "rate_limit_error" in str(caught.value)
    assert len(anthropic_env.requests) == 1  # the SDK itself did not retry


def test_retry_after_ms_wins_over_retry_after(llm, anthropic_env):
    anthropic_env.script(Answer.http_error(429, headers={"retry-after": "7", "retry-after-ms": "1500"}))
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    assert caught.value.retry_after_s == 1.5


@pytest.mark.parametrize("status, kind", [(529, "overloaded_error"), (500, "api_error"), (503, "api_error")])
def test_overloaded_and_server_errors_are_retryable(llm, anthropic_env, status, kind):
    anthropic_env.script(Answer.http_error(status, error_type=kind))
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    assert caught.value.status == status
    assert str(status) in str(caught.value) and kind in str(caught.value)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_client_errors_are_terminal(llm, anthropic_env, status):
    anthropic_env.script(Answer.http_error(status, message="bad thing"))
    with pytest.raises(LLMError) as caught:
        llm.solve(request())
    assert not isinstance(caught.value, LLMRetryableError)
    assert str(status) in str(caught.value) and "bad thing" in str(caught.value)


def test_an_error_event_mid_stream_is_retryable_and_calls_before_it_were_reported(llm, anthropic_env):
    anthropic_env.script(Answer.stream_error(SOLUTION, after=8, chunk_size=10))
    seen = []
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request(), on_call=lambda i, c: seen.append(i))
    assert "overloaded_error" in str(caught.value)
    assert caught.value.status == 200
    assert seen == [0]  # the first call had closed before the error; the runtime dedupes it on the retry


def test_a_connection_cut_mid_stream_is_retryable(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION, chunk_size=10, drop_after=3))
    with pytest.raises(LLMRetryableError):
        llm.solve(request())


def test_an_unreachable_server_is_retryable(monkeypatch):
    with FakeAnthropic() as fake:
        url = fake.base_url
    provider = AnthropicLLM(api_key="k", base_url=url, timeout_s=2)
    with pytest.raises(LLMRetryableError) as caught:
        provider.solve(request())
    assert "reach" in str(caught.value)


def test_a_read_timeout_is_retryable(anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION, first_byte_delay_s=1.5))
    provider = AnthropicLLM(timeout_s=0.3)
    with pytest.raises(LLMRetryableError):
        provider.solve(request())


def test_an_exception_from_on_call_propagates_unchanged(llm, anthropic_env):
    anthropic_env.script(Answer.solution(SOLUTION))

    class Stop(Exception):
        pass

    def on_call(index, call):
        raise Stop(index)

    with pytest.raises(Stop):
        llm.solve(request(), on_call=on_call)


def test_no_scripted_answer_is_a_retryable_500(llm, anthropic_env):
    with pytest.raises(LLMRetryableError, match="no answer was scripted"):
        llm.solve(request())


def test_retry_after_parsing():
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": later}) <= 31


def test_importing_the_llm_package_does_not_load_anthropic():
    code = "import sys, agentq.llm, agentq.llm.factory; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_prepare_loads_the_sdk_without_asking_the_model(anthropic_env):
    """A dispatcher prepares its provider before its first tasks: the client is made and a canned answer read
    through the SDK's stream types, and nothing reaches the API."""
    provider = AnthropicLLM(connections=300)
    try:
        provider.prepare()
        assert anthropic_env.requests == []
        assert provider._shards is not None and len(provider._shards.copies()) == 18  # 300 streams, 16 a pool
        anthropic_env.script(Answer.solution(SOLUTION))
        assert provider.solve(request()).solution == SOLUTION
        assert len(anthropic_env.requests) == 1
    finally:
        provider.close()


def test_a_rate_limited_api_answers_429_with_retry_after_and_every_answer_says_what_remains(llm, anthropic_env):
    """The fake enforces a requests-per-minute limit as the API does (a token bucket); the provider reads its
    `anthropic-ratelimit-*` headers on an answer and on a 429, and the 429's `retry-after`."""
    anthropic_env.limit(requests_per_minute=2)
    anthropic_env.script(Answer.solution(SOLUTION), Answer.solution(SOLUTION))
    first, second = llm.solve(request()), llm.solve(request())
    assert first.rate_limits is not None and first.rate_limits.limits == (2, None, None)
    assert (first.rate_limits.remaining[0], second.rate_limits.remaining[0]) == (1, 0)
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    error = caught.value
    assert error.status == 429 and 29 <= error.retry_after_s <= 30  # one request refills in 30 s at 2 a minute
    assert error.rate_limits.limits[0] == 2 and error.rate_limits.remaining[0] == 0
    assert "rate limit" in str(error)
    assert (anthropic_env.rate_limited, anthropic_env.most_in_window(60), len(anthropic_env.requests)) == (1, 2, 3)


def test_the_threads_of_a_process_share_its_connections_in_pools_of_sixteen(anthropic_env):
    """A provider for 40 streams has three HTTP connection pools (16 threads each): a thread keeps to one, every
    pool answers, the copies share the first client's TLS context, and `close` closes them all."""
    import threading

    provider = AnthropicLLM(connections=40)
    anthropic_env.responder = lambda _: Answer.solution(SOLUTION)
    clients: dict[int, list[Any]] = {}
    answers: list[Any] = []

    def work(n: int) -> None:
        clients[n] = [provider.client, provider.client]
        answers.append(provider.solve(request()))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert all(first is second for first, second in clients.values())  # a thread keeps to its client
        pools = {id(first._client) for first, _ in clients.values()}
        assert len(pools) == 3 and len(answers) == 6 and all(a.solution == SOLUTION for a in answers)
        contexts = {id(first._client._transport._pool._ssl_context) for first, _ in clients.values()}
        assert len(contexts) == 1
        assert len(anthropic_env.requests) == 6
    finally:
        provider.close()
    assert all(first._client.is_closed for first, _ in clients.values())


def test_a_client_given_is_used_by_every_thread(anthropic_env):
    import anthropic

    given = anthropic.Anthropic(api_key="k", base_url=anthropic_env.base_url, max_retries=0)
    provider = AnthropicLLM(client=given, connections=256)
    seen: list[Any] = []
    threads = [threading_thread(lambda: seen.append(provider.client)) for _ in range(3)]
    for thread in threads:
        thread.join()
    assert seen == [given, given, given]
    provider.close()
    assert given._client.is_closed


def threading_thread(target: Any) -> Any:
    import threading

    thread = threading.Thread(target=target)
    thread.start()
    return thread
