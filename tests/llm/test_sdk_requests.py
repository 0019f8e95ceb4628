"""How the Anthropic provider sends its requests and reads their bodies (`agentq/llm/send.py`, `agentq/llm/sse.py`):
the request the SDK would send, built by the SDK once per client; its errors as the SDK raises them; the body's
events as the SDK's decoder reads them; each call of a streamed solution parsed once."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from agentq.errors import LLMRetryableError
from agentq.llm import scanner, send
from agentq.llm.anthropic import AnthropicLLM
from agentq.llm.base import LLMRequest
from agentq.llm.sdk import post
from agentq.llm.sse import Event, sse_events
from tests.fake_anthropic import Answer, FakeAnthropic

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}
CALLS = [{"_tool": "weather", "city": "Paris"}, {"_tool": "mail", "to": "x"},
         {"_tool": "note", "text": "a \"quoted\" }, [bracket"}]
SOLUTION: dict[str, Any] = {"calls": CALLS, "output": None}
BODY = {"model": "claude-test", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "go"}]}


def request() -> LLMRequest:
    return LLMRequest(model="claude-test", system=("agentq instructions",),
                      messages=({"role": "user", "content": [{"type": "text", "text": "go"}]},),
                      solution_schema=SCHEMA, max_tokens=1024)


@pytest.fixture
def llm(anthropic_env: FakeAnthropic) -> Iterator[AnthropicLLM]:
    provider = AnthropicLLM()
    yield provider
    provider.close()


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time the SDK builds a request."""
    built: list[int] = []
    build = anthropic.Anthropic._build_request

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        built.append(1)
        return build(self, *args, **kw)

    monkeypatch.setattr(anthropic.Anthropic, "_build_request", counted)
    return built


def test_a_request_is_the_one_the_sdk_sends_and_the_sdk_builds_it_once(llm, anthropic_env, monkeypatch) -> None:
    """Three requests sent from the client's template and one sent by the SDK's own `post` arrive alike (every
    header, the body); the SDK built a request once for the three."""
    built = count_builds(monkeypatch)
    client = llm.client
    assert send.direct(client)
    for _ in range(3):
        anthropic_env.script(Answer.solution(SOLUTION))
        post(client, BODY).close()
    assert len(built) == 1
    anthropic_env.script(Answer.solution(SOLUTION))
    client.post("/v1/messages", cast_to=anthropic.types.Message, content=json.dumps(BODY, separators=(",", ":")),
                stream=True, stream_cls=anthropic.Stream[anthropic.types.RawMessageStreamEvent]).close()
    first, *rest, by_sdk = anthropic_env.requests
    assert all((r.headers, r.raw) == (first.headers, first.raw) for r in rest)
    assert (first.headers, first.raw) == (by_sdk.headers, by_sdk.raw)
    assert first.headers["authorization"] == "Bearer sk-ant-fake-key"
    assert first.headers["x-stainless-retry-count"] == "0"


def test_a_prepared_provider_builds_no_request_and_a_template_keeps_no_client(anthropic_env, monkeypatch) -> None:
    """`prepare` makes every client copy's template (none is built by a request after it); a client dropped is
    not kept alive by its template."""
    built = count_builds(monkeypatch)
    provider = AnthropicLLM(connections=64)
    try:
        provider.prepare()
        prepared = len(built)
        anthropic_env.script(Answer.solution(SOLUTION))
        assert provider.solve(request()).solution == SOLUTION
    finally:
        provider.close()
    assert prepared == 4 and len(built) == prepared  # 64 connections: four copies of 16
    client = anthropic.Anthropic(api_key="sk-ant-x", base_url=anthropic_env.base_url)
    anthropic_env.script(Answer.solution(SOLUTION))
    post(client, BODY).close()
    gone = weakref.ref(client)
    client.close()
    del client
    gc.collect()
    assert gone() is None


def test_an_error_status_raises_the_sdk_s_error_with_its_retry_after(llm, anthropic_env) -> None:
    anthropic_env.script(Answer.http_error(529, headers={"retry-after": "7"}))
    with pytest.raises(LLMRetryableError) as caught:
        llm.solve(request())
    assert caught.value.status == 529 and caught.value.retry_after_s == 7.0
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)
    assert "overloaded_error" in str(caught.value)


def test_an_unreachable_api_is_the_sdk_s_connection_error() -> None:
    provider = AnthropicLLM(api_key="sk-ant-x", base_url="http://127.0.0.1:9")  # the discard port: refused
    try:
        with pytest.raises(LLMRetryableError) as caught:
            provider.solve(request())
    finally:
        provider.close()
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


def test_a_client_with_the_sdk_s_retries_goes_through_the_sdk(anthropic_env) -> None:
    """With the SDK's own retries on, its `post` sends the request (and retries the 529 itself)."""
    provider = AnthropicLLM(max_retries=1)
    try:
        assert not send.direct(provider.client)
        anthropic_env.script(Answer.http_error(529, headers={"retry-after": "0"}), Answer.solution(SOLUTION))
        answer = provider.solve(request())
    finally:
        provider.close()
    assert answer.solution == SOLUTION and len(anthropic_env.requests) == 2
    assert anthropic_env.requests[1].headers["x-stainless-retry-count"] == "1"


def test_an_sdk_whose_request_internals_differ_sends_through_its_post(anthropic_env, monkeypatch) -> None:
    """The template reads the SDK's private request building; a release where it differs costs speed, not a request."""
    monkeypatch.delattr(anthropic.Anthropic, "_prepare_options")
    provider = AnthropicLLM()
    try:
        anthropic_env.script(Answer.solution(SOLUTION))
        answer = provider.solve(request())
    finally:
        provider.close()
    assert answer.solution == SOLUTION and len(anthropic_env.requests) == 1


def test_each_call_of_a_streamed_solution_is_parsed_once(llm, anthropic_env, monkeypatch) -> None:
    """The calls' scanner never parses the text streamed so far again: one parse per complete call, whatever the
    pieces (here one character each), and of each of the solution's top-level keys."""
    parsed: list[str] = []

    class Counting:
        def loads(self, text: str) -> Any:
            parsed.append(text)
            return json.loads(text)

        def __getattr__(self, name: str) -> Any:
            return getattr(json, name)

    monkeypatch.setattr(scanner, "json", Counting())
    text = json.dumps(SOLUTION, separators=(",", ":"))
    anthropic_env.script(Answer.solution(SOLUTION, chunk_size=1))
    seen: list[tuple[int, dict]] = []
    answer = llm.solve(request(), on_call=lambda index, call: seen.append((index, call)))
    assert answer.solution == SOLUTION and seen == list(enumerate(CALLS))
    # the solution's top-level keys ("calls", "output"), which the scanner reads, and each call
    calls = [json.dumps(c, separators=(",", ":")) for c in CALLS]
    assert parsed == ['"calls"', *calls, '"output"']
    assert len(text) > 100  # a hundred pieces, each scanned once


# ------------------------------------------------------------------------------------------ the body's events


def stream_of(pieces: list[bytes], *, headers: dict[str, str] | None = None) -> Any:
    """An SDK stream over a body that comes in `pieces`."""
    client = anthropic.Anthropic(api_key="sk-ant-x", base_url="http://127.0.0.1:9")
    response = httpx2.Response(200, headers={"content-type": "text/event-stream", **(headers or {})},
                               stream=httpx2.ByteStream(b"") if not pieces else _Pieces(pieces),
                               request=httpx2.Request("POST", "http://127.0.0.1:9/v1/messages"))
    return anthropic.Stream(cast_to=anthropic.types.Message, response=response, client=client)


class _Pieces(httpx2.SyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces


def by_sdk(pieces: list[bytes]) -> list[Event]:
    return [Event(sse.event, sse.data) for sse in stream_of(pieces)._iter_events()]


BODIES = [
    [b'event: message_start\ndata: {"a": 1}\n\n', b"event: ping\ndata: {}\n\n"],
    [b"event: mess", b'age_start\ndata: {"a"', b": 1}\n", b"\nevent: x\n", b"data: 1\n\n"],  # cut anywhere
    [b": a comment\nevent: e\ndata: one\ndata: two\nid: 4\n\n", b"data: unnamed\n\nevent:no-space\ndata:x\n\n"],
    [b"event: a\r\ndata: 1\r\n\r\n", b"event: b\r\ndata: 2\r\n\r\n"],  # carriage returns: the SDK's decoder
    [b"event: a\ndata: 1\n\nevent: b\r", b"\ndata: 2\r\n\r\nevent: c\rdata: 3\r\r"],
    [b'event: a\ndata: {"t": "\xc3\xa9"}\n\nevent: cut\ndata: 1\n'],  # an event the body ends before is dropped
    [],
]


@pytest.mark.parametrize("pieces", BODIES)
def test_the_body_s_events_are_the_sdk_decoder_s(pieces: list[bytes]) -> None:
    assert list(sse_events(stream_of(pieces))) == by_sdk(pieces)


def test_an_encoded_body_is_read_by_the_sdk(monkeypatch) -> None:
    """A body with a content encoding is httpx's to decode: the SDK's reading is used."""
    used: list[int] = []
    iter_events = anthropic.Stream._iter_events

    def counted(self: Any) -> Any:
        used.append(1)
        return iter_events(self)

    monkeypatch.setattr(anthropic.Stream, "_iter_events", counted)
    import gzip

    body = gzip.compress(b'event: a\ndata: {"x": 1}\n\n')
    assert list(sse_events(stream_of([body], headers={"content-encoding": "gzip"}))) == [Event("a", '{"x": 1}')]
    assert used == [1]
    assert list(sse_events(stream_of([b"event: a\ndata: 1\n\n"]))) == [Event("a", "1")] and used == [1]
