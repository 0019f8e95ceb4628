"""A fake Anthropic Messages API: a real HTTP server on 127.0.0.1 that the real `anthropic` SDK talks to.

Tests script the answers, point the SDK at :attr:`FakeAnthropic.base_url` (or set ``ANTHROPIC_BASE_URL``) with
any API key, and inspect what arrived::

    from tests.fake_anthropic import FakeAnthropic, Answer

    with FakeAnthropic() as fake:
        fake.script(Answer.solution({"calls": [...], "output": None}, chunk_size=8, delay_s=0.05),
                    Answer.http_error(429, headers={"retry-after": "3"}))
        ...                                    # run code that calls the SDK with base_url=fake.base_url
        body = fake.requests[0].body           # the parsed JSON body
        fake.exchanges[0].last_chunk_at        # time.monotonic() when the last delta was sent

It counts what a test of concurrency needs: :attr:`FakeAnthropic.in_flight` and ``peak_in_flight`` (requests
answered at once; ``reset_peak()``). ``fake.limit(requests_per_minute=R)`` makes it enforce a rate limit as the real
API does (a token bucket of capacity R, refilled continuously): a request beyond it gets a 429 ``rate_limit_error``
with ``retry-after``, every answer carries the ``anthropic-ratelimit-requests-*`` headers, and it counts the 429s
(``rate_limited``) and the requests it let through (``admitted_at``, ``most_in_window(seconds)``).

Fixtures: ``fake_anthropic`` (a started server) and ``anthropic_env`` (the server plus ``ANTHROPIC_BASE_URL``
and a fake ``ANTHROPIC_API_KEY`` in the environment); import them into a conftest.py to use them.

A responder can look at what was asked: :class:`RecordedRequest` has ``body``, ``headers``,
``solution_schema`` (the forced tool's input schema), ``last_user_text`` and ``is_latent``.

``POST /v1/messages`` answers from the script queue, oldest first; an item may also be a callable
``(RecordedRequest) -> Answer`` (to answer by what was asked, e.g. parallel latent calls). When the queue is
empty, :attr:`FakeAnthropic.responder` answers if set; otherwise the server answers 500 with a message saying
no answer was scripted, so a test that asks more than it scripted fails loudly. A streaming request (``"stream":
true``) gets server-sent events exactly like the real API's (message_start, content_block_start tool_use,
input_json_delta chunks, content_block_stop, message_delta with usage, message_stop); any other request gets a
plain JSON Message.

Stop reasons and thinking: ``Answer.cut(solution, after=k)`` stops with ``max_tokens`` after k chunks of the tool
input (mid ``input_json_delta``), ``Answer.refusal(text)`` declines, ``Answer.window_full(...)`` stops with
``model_context_window_exceeded``; ``thinking=[...]`` / ``redacted_thinking=n`` on any answer sends signed thinking
blocks first (``thinking_delta``, ``signature_delta``), which later requests must carry back unchanged;
``context_window`` (tokens, about 4 bytes each) answers a longer request 400 "prompt is too long".

Before any answer, the request is checked the way the real API checks it (:func:`request_refusal`): a request
the real API refuses gets the same 400 ``invalid_request_error`` here, with the real error body ``{"type":
"error", "error": {"type": "invalid_request_error", "message": ...}, "request_id": ...}``, and uses no scripted
answer. The refusals are listed in :attr:`FakeAnthropic.refusals` (the ``fake_anthropic`` fixture fails a test
whose requests were refused, unless it set ``refusals_expected``); ``FakeAnthropic(check_requests=False)``
turns the checks off.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
import json
import math
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

__all__ = ["Answer", "Exchange", "FakeAnthropic", "FakeBatch", "FakeBatches", "RecordedRequest", "anthropic_env",
           "cache_creation", "fake_anthropic", "input_schema_refusal", "request_refusal"]

DEFAULT_USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}


@dataclass
class Answer:
    """One scripted answer. Build with :meth:`solution`, :meth:`raw`, :meth:`http_error` or :meth:`stream_error`.

    ``chunks`` are the ``partial_json`` pieces of the solution tool's input, sent ``delay_s`` apart.
    ``error_after``: after that many chunks an ``error`` event (``error_type``) is sent and the stream ends.
    ``drop_after``: after that many chunks the connection is closed without finishing the stream.
    ``usage``: message_start's usage (``output_tokens`` there is 1, the message_delta carries the total); its
    ``cache_creation`` split by TTL is added as the real API reports it (the TTL of the request's last
    breakpoint) unless the usage gives one.
    ``preamble``: an optional text block the model writes before the tool_use.
    ``thinking``: the summaries of thinking blocks sent first (``thinking_delta`` pieces, then a ``signature_delta``
    the fake can verify), and ``redacted_thinking`` opaque blocks after them (docs/rate-limits.md; only with thinking
    on).
    ``cut_after``: the stream stops after that many chunks of the tool input with ``stop_reason`` (max_tokens).
    ``no_tool``: no tool_use block at all (the ``preamble`` is the whole answer: a refusal, a chatty answer).
    """

    chunks: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    error_after: int | None = None
    error_type: str = "overloaded_error"
    drop_after: int | None = None
    usage: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_USAGE))
    stop_reason: str = "tool_use"
    tool_use_id: str | None = None
    preamble: str | None = None
    first_byte_delay_s: float = 0.0
    thinking: list[str] = field(default_factory=list)
    redacted_thinking: int = 0
    cut_after: int | None = None
    no_tool: bool = False

    @classmethod
    def solution(cls, solution: Any, *, chunk_size: int = 16, **kw: Any) -> Answer:
        """A solution streamed as compact JSON in pieces of ``chunk_size`` characters."""
        return cls.raw(json.dumps(solution, ensure_ascii=False, separators=(",", ":")), chunk_size=chunk_size, **kw)

    @classmethod
    def raw(cls, text: str, *, chunk_size: int = 16, **kw: Any) -> Answer:
        """Any text as the tool input (e.g. invalid JSON), in pieces of ``chunk_size`` characters."""
        size = max(1, chunk_size)
        return cls(chunks=[text[i:i + size] for i in range(0, len(text), size)] or [""], **kw)

    @classmethod
    def http_error(cls, status: int, *, error_type: str | None = None, message: str | None = None,
                   headers: dict[str, str] | None = None) -> Answer:
        """An HTTP error answer with the API's error body ``{"type": "error", "error": {type, message}}``."""
        error_type = error_type or _ERROR_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": error_type, "message": message or f"fake {error_type}"}}
        return cls(status=status, headers=dict(headers or {}), body=body)

    @classmethod
    def stream_error(cls, solution: Any, *, after: int = 1, error_type: str = "overloaded_error", **kw: Any) -> Answer:
        """A stream that starts the solution and then sends an ``error`` event after ``after`` chunks."""
        answer = cls.solution(solution, **kw)
        answer.error_after, answer.error_type = after, error_type
        return answer

    @classmethod
    def cut(cls, solution: Any, *, after: int, **kw: Any) -> Answer:
        """A solution whose stream stops with ``stop_reason: max_tokens`` after ``after`` chunks of its input."""
        answer = cls.solution(solution, **kw)
        answer.cut_after, answer.stop_reason = after, "max_tokens"
        return answer

    @classmethod
    def refusal(cls, text: str, **kw: Any) -> Answer:
        """The model declines: a text block and ``stop_reason: refusal``, no tool call."""
        return cls(preamble=text, no_tool=True, stop_reason="refusal", **kw)

    @classmethod
    def window_full(cls, solution: Any, *, after: int = 1, **kw: Any) -> Answer:
        """The answer stops with ``stop_reason: model_context_window_exceeded`` after ``after`` chunks."""
        answer = cls.solution(solution, **kw)
        answer.cut_after, answer.stop_reason = after, "model_context_window_exceeded"
        return answer

    @property
    def text_of_solution(self) -> str:
        return "".join(self.chunks)


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                529: "overloaded_error"}


@dataclass
class RecordedRequest:
    """A request as it arrived: lower-cased headers, the parsed JSON body, and when (time.monotonic())."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    received_at: float

    @property
    def solution_schema(self) -> Any:
        """The ``input_schema`` of the request's ``solution`` tool (None if it has none)."""
        tools = (self.body or {}).get("tools") or [{}]
        return tools[0].get("input_schema")

    @property
    def last_user_text(self) -> str:
        """The texts of the last user turn (text blocks and tool_result contents), joined by newlines."""
        for turn in reversed((self.body or {}).get("messages") or []):
            if turn.get("role") == "user":
                return "\n".join(_texts(turn.get("content")))
        return ""

    @property
    def is_latent(self) -> bool:
        """Whether this looks like a latent call's request (its solution schema has only ``output``)."""
        schema = self.solution_schema or {}
        return list(schema.get("properties") or {}) == ["output"]


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    yield block["text"]
                if "content" in block:
                    yield from _texts(block["content"])


@dataclass
class Exchange:
    """A request, the answer given, and when each chunk went out (time.monotonic())."""

    request: RecordedRequest
    answer: Answer | None
    chunk_times: list[float] = field(default_factory=list)
    finished_at: float | None = None

    @property
    def last_chunk_at(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else None


class _Headers(dict):
    """A request's headers by lower-cased name (`get` takes any case, as the email package's message does)."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # hundreds of clients connect at once (a dispatcher holding many streams)


class FakeAnthropic:
    """The fake server. ``start()``/``stop()`` or use it as a context manager."""

    def __init__(self, *, host: str = "127.0.0.1", model: str = "claude-fake", check_requests: bool = True) -> None:
        self.host = host
        self.model = model
        self.check_requests = check_requests
        self.context_window: int | None = None  # tokens (about 4 bytes each of a body): longer prompts are refused
        self.thought: dict[str, list[dict]] = {}  # tool_use id -> the thinking blocks sent before it
        self.refusals: list[tuple[RecordedRequest, str]] = []
        self.refusals_expected = False
        self.responder: Callable[[RecordedRequest], Answer] | None = None
        self.exchanges: list[Exchange] = []
        self._script: queue.SimpleQueue[Answer | Callable[[RecordedRequest], Answer]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._ids = 0  # the last id given (`_next_id`)
        self.in_flight = 0  # requests being answered right now
        self.peak_in_flight = 0  # the most answered at once since the start (or `reset_peak`)
        self.rpm: int | None = None  # the requests-per-minute limit it enforces (`limit`)
        self.rate_limited = 0  # how many requests it answered 429 for that limit
        self.admitted_at: list[float] = []  # time.monotonic() of each request the limit let through
        self._bucket = (0.0, 0.0)  # (level, when)
        self.batches = FakeBatches(self)  # /v1/messages/batches (see the Message Batches section)
        # the prompt cache (`tests/fake_prompt_cache.py`'s PromptCache): when set, an answer's usage reports the
        # input, cache-read and cache-creation tokens the request's prefix gets, as the real API counts them
        self.prompt_cache: Any = None

    # -------------------------------------------------------------------------------- lifecycle

    def start(self) -> FakeAnthropic:
        server = _Server((self.host, 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake server is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -------------------------------------------------------------------------------- scripting

    def script(self, *answers: Answer | Callable[[RecordedRequest], Answer]) -> FakeAnthropic:
        """Queue answers (or callables making them), given in order to the next requests."""
        for answer in answers:
            self._script.put(answer)
        return self

    def answer_solution(self, solution: Any, **kw: Any) -> FakeAnthropic:
        """Shorthand for ``script(Answer.solution(solution, **kw))``."""
        return self.script(Answer.solution(solution, **kw))

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [e.request for e in self.exchanges]

    @property
    def pending(self) -> int:
        """How many scripted answers were not used yet."""
        return self._script.qsize()

    def _next_answer(self, request: RecordedRequest) -> Answer | None:
        try:
            item = self._script.get_nowait()
        except queue.Empty:
            item = self.responder  # type: ignore[assignment]
            if item is None:
                return None
        return item(request) if callable(item) else item

    def _record(self, request: RecordedRequest, answer: Answer | None) -> Exchange:
        exchange = Exchange(request, answer)
        with self._lock:
            self.exchanges.append(exchange)
        return exchange

    # -------------------------------------------------------------------------------- rate limits

    def limit(self, *, requests_per_minute: int) -> FakeAnthropic:
        """Enforce a requests-per-minute limit as the API does: a token bucket whose capacity is the limit, refilled
        continuously. A request beyond it is answered 429 `rate_limit_error` with `retry-after` (whole seconds)
        and, like every answer while a limit is set, the `anthropic-ratelimit-requests-limit`, `-remaining` and
        `-reset` headers (RFC 3339: when the bucket is full again)."""
        with self._lock:
            self.rpm = requests_per_minute
            self._bucket = (float(requests_per_minute), time.monotonic())
        return self

    def most_in_window(self, window_s: float) -> int:
        """The most requests the limit let through within any `window_s` seconds."""
        times = sorted(self.admitted_at)
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= window_s:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _admit(self) -> dict[str, str] | None:
        """Take one request from the bucket: None when it may go, else the 429's headers."""
        with self._lock:
            if self.rpm is None:
                return None
            level, now = self._level(), time.monotonic()
            if level >= 1:
                self._bucket = (level - 1, now)
                self.admitted_at.append(now)
                return None
            self._bucket = (level, now)
            self.rate_limited += 1
            return {"retry-after": str(max(1, math.ceil((1 - level) * 60 / self.rpm))), **self._limit_headers()}

    def _level(self) -> float:
        level, at = self._bucket
        assert self.rpm is not None
        return min(float(self.rpm), level + (time.monotonic() - at) * self.rpm / 60)

    def _limit_headers(self) -> dict[str, str]:
        """The `anthropic-ratelimit-requests-*` headers while a limit is set (call with the lock held)."""
        if self.rpm is None:
            return {}
        level = self._level()
        full_in = (self.rpm - level) * 60 / self.rpm
        reset = datetime.now(UTC) + timedelta(seconds=full_in)
        return {"anthropic-ratelimit-requests-limit": str(self.rpm),
                "anthropic-ratelimit-requests-remaining": str(max(0, math.floor(level))),
                "anthropic-ratelimit-requests-reset": reset.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def limit_headers(self) -> dict[str, str]:
        with self._lock:
            return self._limit_headers()

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def reset_peak(self) -> None:
        """Start counting the peak of requests in flight again (from those in flight now)."""
        with self._lock:
            self.peak_in_flight = self.in_flight

    def history_refusal(self, body: Any) -> str | None:
        """What the API refuses in a request because of what this server answered before: thinking blocks left
        out of (or changed in) the assistant turns that had them."""
        with self._lock:
            thought = dict(self.thought)
        return thinking_history_refusal(body, thought)

    def _refuse(self, request: RecordedRequest, message: str) -> None:
        self._record(request, Answer.http_error(400, message=message))
        with self._lock:
            self.refusals.append((request, message))

    def _next_id(self, prefix: str) -> str:
        """A new id, never given before (as the API's are): two answers in flight at once never share a tool_use id,
        so the thinking remembered for one (`thought`) is never another's."""
        with self._lock:
            self._ids += 1
            return f"{prefix}_fake{self._ids:04d}"


# ------------------------------------------------------------------------------- what the real API refuses
#
# Each rule below is one the real Messages API enforces, with the message it answers (the API's own wording,
# as its 400 bodies show it; "messages.3" is the index of the offending turn):
#
# * a custom tool's ``input_schema`` must be ``type: "object"``, have no ``anyOf``/``oneOf``/``allOf`` at the
#   top level ("input_schema does not support oneOf, allOf, or anyOf at the top level"), and be a valid JSON
#   Schema draft 2020-12 ("JSON schema is invalid. It must match JSON Schema draft 2020-12 ..."; an empty
#   ``anyOf`` is invalid there: the metaschema wants a non-empty array); its property keys match
#   ``^[a-zA-Z0-9_.-]{1,64}$``;
# * text blocks must be non-empty ("text content blocks must be non-empty"), and a turn whose only text is
#   whitespace is refused ("text content blocks must contain non-whitespace text");
# * every turn but an optional final assistant turn has content; a final assistant turn may not end with
#   whitespace; the first turn is the user's; roles are "user" or "assistant" (consecutive turns of one role
#   are accepted: the API combines them into one turn, as its reference for ``messages`` says);
# * every ``tool_use`` of an assistant turn is answered by a ``tool_result`` with its id in the next turn, the
#   ``tool_result`` blocks first; a ``tool_result`` answers a ``tool_use`` of the turn just before it;
#   ``tool_use`` ids match ``^[a-zA-Z0-9_-]+$``;
# * at most 4 blocks carry ``cache_control`` (tools, system and messages together); its ``type`` is
#   ``"ephemeral"`` and its ``ttl``, when given, ``"5m"`` or ``"1h"`` (the default is 5m); a 1h breakpoint may not
#   come after a 5m one, in the order tools, system, messages ("a ttl='1h' cache_control block must not come
#   after a ttl='5m' cache_control block ...");
# * ``thinking`` may not be enabled with a ``tool_choice`` that forces tool use ("any" or "tool"); its type is
#   enabled, disabled or adaptive; an enabled one's ``budget_tokens`` is >= 1024 and below ``max_tokens``;
#   ``temperature`` other than 1 and ``top_k`` are refused with it; a ``thinking`` block whose thinking or
#   signature changed, or a ``redacted_thinking`` block that is not the API's, is refused ("Invalid `signature`
#   in `thinking` block"); with thinking on, an assistant turn whose tool_use came with thinking must start with
#   it (the server remembers what it sent: ``FakeAnthropic.history_refusal``).
#
# The fake adds, after the real message of an invalid JSON Schema, what jsonschema found (the real API does
# not say): it is what a developer needs to fix the schema.

_SCHEMA_INVALID = ("JSON schema is invalid. It must match JSON Schema draft 2020-12 "
                   "(https://json-schema.org/draft/2020-12). Learn more about tool use at "
                   "https://docs.anthropic.com/en/docs/tool-use.")
_PROPERTY_KEY = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_MAX_CACHE_BREAKPOINTS = 4
_CACHE_TTLS = ("5m", "1h")


@functools.lru_cache(maxsize=256)
def _schema_error(text: str) -> str | None:
    """What jsonschema finds wrong with the schema whose JSON is `text` (the metaschema check takes milliseconds, and
    a job's requests repeat one solution schema)."""
    try:
        Draft202012Validator.check_schema(json.loads(text))
    except SchemaError as error:
        pointer = "".join(f"/{part}" for part in error.absolute_path) or "/"
        return f"{error.message} at {pointer}"
    return None


def input_schema_refusal(schema: Any, where: str = "tools.0.custom.input_schema") -> str | None:
    """Why the real API refuses ``schema`` as a tool's ``input_schema`` (the 400 message), or None."""
    if not isinstance(schema, dict):
        return f"{where}: Input should be a valid dictionary"
    if schema.get("type") != "object":
        return f"{where}.type: Input should be 'object'"
    if any(key in schema for key in ("anyOf", "oneOf", "allOf")):
        return f"{where}: input_schema does not support oneOf, allOf, or anyOf at the top level"
    invalid = _schema_error(json.dumps(schema, sort_keys=True))
    if invalid is not None:
        return f"{where}: {_SCHEMA_INVALID} (fake: {invalid})"
    for key in schema.get("properties") or {}:
        if not _PROPERTY_KEY.match(key):
            return f"{where}.properties: Property keys should match pattern '{_PROPERTY_KEY.pattern}'"
    return None


def request_refusal(body: Any) -> str | None:
    """The message of the 400 ``invalid_request_error`` the real Messages API answers ``body`` with, or None
    when it would accept it (as far as the rules above go)."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    for check in (_tools_refusal, _system_refusal, _messages_refusal, _cache_refusal, _thinking_refusal):
        refusal = check(body)
        if refusal is not None:
            return refusal
    return None


def _tools_refusal(body: dict) -> str | None:
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and tool.get("type", "custom") == "custom":
            refusal = input_schema_refusal(tool.get("input_schema"), f"tools.{i}.custom.input_schema")
            if refusal is not None:
                return refusal
    return None


def _system_refusal(body: dict) -> str | None:
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) and system == "" else system
    if isinstance(blocks, list) and any(_is_text(b) and b.get("text") == "" for b in blocks):
        return "system: text content blocks must be non-empty"
    return None


def _is_text(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text"


def _blocks(content: Any) -> list[dict]:
    """A turn's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _all_texts(blocks: list[dict]) -> Iterator[str]:
    """Every text block's text, those of a tool_result's content blocks included (a tool_result's plain string
    content is not a text block)."""
    for block in blocks:
        if _is_text(block):
            yield str(block.get("text"))
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            yield from _all_texts(_blocks(block["content"]))


def _turn_refusal(i: int, turn: Any, final: bool) -> str | None:
    """The rules of one turn on its own: role, content, text blocks, the final assistant turn."""
    if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
        return f"messages.{i}.role: Input should be 'user' or 'assistant'"
    blocks = _blocks(turn.get("content"))
    final_assistant = final and turn["role"] == "assistant"
    if not blocks and not final_assistant:
        return (f"messages.{i}: all messages must have non-empty content except for the optional final "
                f"assistant message")
    if any(text == "" for text in _all_texts(blocks)):
        return "messages: text content blocks must be non-empty"
    texts = [str(b.get("text")) for b in blocks if _is_text(b)]
    if texts and len(texts) == len(blocks) and not any(t.strip() for t in texts):
        return "messages: text content blocks must contain non-whitespace text"
    if final_assistant and texts and _is_text(blocks[-1]) and texts[-1] != texts[-1].rstrip():
        return "messages: final assistant content cannot end with trailing whitespace"
    return None


def _tool_use_ids(turn: dict, blocks: list[dict]) -> list[str]:
    if turn.get("role") != "assistant":
        return []
    return [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]


def _pairing_refusal(i: int, messages: list, blocks_of: list[list[dict]]) -> str | None:
    """The tool_use / tool_result rules of turn ``i`` (``blocks_of``: each turn's content as blocks)."""
    turn, blocks = messages[i], blocks_of[i]
    if turn["role"] == "assistant":
        for j, block in enumerate(blocks):
            if block.get("type") == "tool_use" and not _TOOL_USE_ID.match(str(block.get("id") or "")):
                return f"messages.{i}.content.{j}.tool_use.id: String should match pattern '{_TOOL_USE_ID.pattern}'"
        ids = _tool_use_ids(turn, blocks)
        if ids and i + 1 < len(messages):
            answered = set()
            for block in blocks_of[i + 1] if messages[i + 1].get("role") == "user" else []:
                if block.get("type") != "tool_result":
                    break  # the tool_result blocks come first: one after a text answers nothing
                answered.add(str(block.get("tool_use_id")))
            missing = [x for x in ids if x not in answered]
            if missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` "
                        f"block in the next message.")
        return None
    asked = set(_tool_use_ids(messages[i - 1], blocks_of[i - 1])) if i > 0 else set()
    for j, block in enumerate(blocks):
        if block.get("type") == "tool_result" and str(block.get("tool_use_id")) not in asked:
            return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                    f"block in the previous message.")
    return None


def _messages_refusal(body: dict) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, turn in enumerate(messages):
        refusal = _turn_refusal(i, turn, final=i == len(messages) - 1)
        if refusal is not None:
            return refusal
    if messages[0]["role"] != "user":
        return 'messages: first message must use the "user" role'
    blocks_of = [_blocks(turn.get("content")) for turn in messages]
    for i in range(len(messages)):
        refusal = _pairing_refusal(i, messages, blocks_of)
        if refusal is not None:
            return refusal
    return None


def _cache_breakpoints(value: Any, path: str) -> Iterator[tuple[str, dict]]:
    """The blocks of a request part that carry ``cache_control`` (nested blocks included), with their paths, in
    the order the API processes them."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _cache_breakpoints(item, f"{path}.{i}")
    elif isinstance(value, dict):
        if value.get("cache_control"):
            yield path, value
        if "content" in value:
            yield from _cache_breakpoints(value.get("content"), f"{path}.content")


def _cache_refusal(body: dict) -> str | None:
    found = [b for part in ("tools", "system", "messages") for b in _cache_breakpoints(body.get(part), part)]
    if len(found) > _MAX_CACHE_BREAKPOINTS:
        return f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {len(found)}."
    short_seen = False
    for path, block in found:
        control = block["cache_control"]
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            kind = control.get("type") if isinstance(control, dict) else control
            return (f"{path}.cache_control: Input tag {kind!r} found using 'type' does not match any of the expected "
                    "tags: 'ephemeral'")
        ttl = control.get("ttl", "5m")
        if ttl not in _CACHE_TTLS:
            return f"{path}.cache_control.ephemeral.ttl: Input should be '5m' or '1h'"
        if ttl == "1h" and short_seen:
            return (f"{path}.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' "
                    "cache_control block. Note that blocks are processed in the following order: `tools`, "
                    "`system`, `messages`.")
        short_seen = short_seen or ttl == "5m"
    return None


def cache_creation(body: Any, written: int) -> dict[str, int]:
    """The usage's ``cache_creation`` split of ``written`` cache-write tokens, as the real API reports it: the fake
    writes the prefix up to the request's last breakpoint, with that breakpoint's TTL."""
    found = [b for part in ("tools", "system", "messages")
             for _, b in _cache_breakpoints((body or {}).get(part), part)] if isinstance(body, dict) else []
    ttl = found[-1]["cache_control"].get("ttl", "5m") if found else "5m"
    return {"ephemeral_5m_input_tokens": written if ttl == "5m" else 0,
            "ephemeral_1h_input_tokens": written if ttl == "1h" else 0}


def _usage(answer: Answer, body: Any) -> dict[str, Any]:
    """The answer's usage as the real API reports it (the cache writes split by TTL)."""
    usage: dict[str, Any] = dict(answer.usage)
    usage.setdefault("cache_creation", cache_creation(body, int(usage.get("cache_creation_input_tokens") or 0)))
    return usage


_THINKING_DOCS = "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_SIGNING_KEY = b"fake-anthropic-thinking"
_MIN_THINKING_BUDGET = 1024


def thinking_signature(thinking: str) -> str:
    """The signature the fake gives a thinking block: it verifies that the thinking came back unchanged."""
    return base64.b64encode(hmac.new(_SIGNING_KEY, thinking.encode(), hashlib.sha256).digest()).decode()


def redacted_data(seed: str) -> str:
    """An opaque redacted_thinking payload the fake can recognise as its own."""
    mac = hmac.new(_SIGNING_KEY, seed.encode(), hashlib.sha256).hexdigest()[:16]
    return base64.b64encode(f"{seed}.{mac}".encode()).decode()


def _redacted_valid(data: Any) -> bool:
    try:
        seed, mac = base64.b64decode(str(data)).decode().rsplit(".", 1)
    except ValueError:
        return False
    return hmac.compare_digest(mac, hmac.new(_SIGNING_KEY, seed.encode(), hashlib.sha256).hexdigest()[:16])


def _thinking_config_refusal(thinking: Any, body: dict) -> str | None:
    """The rules of the `thinking` parameter itself: its type, its budget (>= 1024, below max_tokens), and the
    sampling parameters it does not allow."""
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
        return "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'"
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < _MIN_THINKING_BUDGET:
            return f"thinking.enabled.budget_tokens: Input should be greater than or equal to {_MIN_THINKING_BUDGET}"
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] <= budget:
            return f"`max_tokens` must be greater than `thinking.budget_tokens`. {_THINKING_DOCS}#max-tokens"
    if thinking["type"] != "disabled":
        if body.get("temperature") not in (None, 1):
            return f"`temperature` may only be set to 1 when thinking is enabled. {_THINKING_DOCS}"
        if body.get("top_k") is not None:
            return f"`top_k` is not supported when thinking is enabled. {_THINKING_DOCS}"
    return None


def _thinking_refusal(body: dict) -> str | None:
    thinking, choice = body.get("thinking"), body.get("tool_choice")
    if thinking is not None:
        refusal = _thinking_config_refusal(thinking, body)
        if refusal is not None:
            return refusal
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive") and isinstance(choice, dict) \
            and choice.get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return _signature_refusal(body.get("messages"))


def _signature_refusal(messages: Any) -> str | None:
    """A thinking block whose thinking or signature was changed, or a redacted block that is not the API's."""
    for i, turn in enumerate(messages if isinstance(messages, list) else []):
        for j, block in enumerate(_blocks(turn.get("content")) if isinstance(turn, dict) else []):
            if block.get("type") == "thinking" and not hmac.compare_digest(
                    str(block.get("signature") or ""), thinking_signature(str(block.get("thinking") or ""))):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            if block.get("type") == "redacted_thinking" and not _redacted_valid(block.get("data")):
                return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
    return None


def thinking_history_refusal(body: Any, thought: dict[str, list[dict]]) -> str | None:
    """With thinking on, an assistant turn holding a tool_use the fake answered with thinking must start with that
    thinking, unchanged (the API wants at least the last one's; the fake wants every one, as agentq keeps them
    all so the cached prefix stays valid). `thought`: tool_use id -> the blocks sent before it."""
    thinking = body.get("thinking") if isinstance(body, dict) else None
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    for i, turn in enumerate(body.get("messages") or []):
        if not isinstance(turn, dict) or turn.get("role") != "assistant":
            continue
        blocks = _blocks(turn.get("content"))
        for j, block in enumerate(blocks):
            expected = thought.get(str(block.get("id"))) if block.get("type") == "tool_use" else None
            if expected and [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks[:j]] != expected:
                return (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                        f"`{(blocks[0] if blocks else {}).get('type')}`. When `thinking` is enabled, a final "
                        "`assistant` message must start with a thinking block (preceeding the lastmost set of "
                        "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
                        f"previous turns. To avoid this requirement, disable `thinking`. {_THINKING_DOCS}")
    return None


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # small SSE writes go out at once (else ~40 ms per answer)
        protocol_version = "HTTP/1.1"
        raw_requestline: bytes  # set by `handle_one_request` before `parse_request` (not in the stubs)

        def log_message(self, format: str, *args: Any) -> None:  # keep the test output quiet
            pass

        def parse_request(self) -> bool:
            """`BaseHTTPRequestHandler.parse_request` for HTTP/1.x requests (the SDK sends 1.1), the headers read
            into a plain dict (`_Headers`) instead of through the email package's parser: that parser was a third
            of the fake's CPU per request, CPU taken from what a benchmark measures on the same machine. Anything
            else (another HTTP version, a malformed line, too many or too long headers) is a 400. No
            ``Expect: 100-continue`` (the SDK sends none)."""
            self.command, self.request_version, self.close_connection = "", "HTTP/1.1", True  # no command yet
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            words = self.requestline.split()
            if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
                self.send_error(400, f"Bad request line ({self.requestline!r})")
                return False
            self.command, self.path, self.request_version = words
            headers = _Headers()
            for _ in range(100):
                line = self.rfile.readline(65537)
                if len(line) > 65536 or not line.endswith(b"\n"):
                    self.send_error(400, "Header line too long or cut")
                    return False
                if line in (b"\r\n", b"\n"):
                    break
                name, colon, value = str(line, "iso-8859-1").partition(":")
                if not colon or not name.strip():
                    self.send_error(400, f"Bad header line ({line!r})")
                    return False
                headers.setdefault(name.strip().lower(), value.strip())
            else:
                self.send_error(400, "Too many headers")
                return False
            self.headers = headers  # type: ignore[assignment]
            closing = headers.get("connection", "").lower() == "close"
            self.close_connection = closing or self.request_version == "HTTP/1.0"
            return True

        def do_POST(self) -> None:
            if self.path.startswith(BATCHES_PATH):
                self._batches("POST")
                return
            fake._enter()
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):  # the client hung up (e.g. its timeout): fine
                self.close_connection = True
            finally:
                fake._leave()

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw,
                                      time.monotonic())
            if self.path.split("?")[0] != "/v1/messages":
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                return
            limited = fake._admit()
            if limited is not None:
                fake._record(request, Answer.http_error(429, headers=limited))
                self._json(429, {"type": "error", "error": {
                    "type": "rate_limit_error", "message": "This request would exceed the rate limit for your "
                    f"organization of {fake.rpm} requests per minute."}, "request_id": fake._next_id("req")},
                    limited)
                return
            refusal = request_refusal(body) if fake.check_requests else None
            if refusal is None and fake.check_requests:
                refusal = fake.history_refusal(body)
            if refusal is None and fake.context_window is not None and len(raw) // 4 > fake.context_window:
                refusal = f"prompt is too long: {len(raw) // 4} tokens > {fake.context_window} maximum"
            if refusal is not None:
                fake._refuse(request, refusal)
                self._json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": refusal},
                                 "request_id": fake._next_id("req")})
                return
            answer = fake._next_answer(request)
            if answer is not None and answer.status == 200 and fake.prompt_cache is not None and isinstance(body, dict):
                answer = dataclasses.replace(answer, usage={**answer.usage, **fake.prompt_cache.usage(body)})
            exchange = fake._record(request, answer)
            if answer is None:
                self._json(500, {"type": "error", "error": {
                    "type": "api_error", "message": "fake Anthropic server: no answer was scripted for this request"}})
            elif answer.status != 200:
                self._json(answer.status, answer.body, answer.headers)
            elif isinstance(body, dict) and body.get("stream"):
                self._stream(answer, body, exchange)
            else:
                self._message(answer, body if isinstance(body, dict) else {}, exchange)
            exchange.finished_at = time.monotonic()

        def do_GET(self) -> None:
            if self.path.startswith(BATCHES_PATH):
                self._batches("GET")
                return
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

        def _batches(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            status, body, content_type = fake.batches.handle(method, self.path.split("?")[0], raw)
            if content_type == "json":
                self._json(status, body)
                return
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", fake._next_id("req"))
            for key, value in {**fake.limit_headers(), **(headers or {})}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _message(self, answer: Answer, body: dict, exchange: Exchange) -> None:
            text = answer.text_of_solution
            try:
                tool_input = json.loads(text)
            except ValueError:
                tool_input = {}
            content: list[dict] = [{"type": "text", "text": answer.preamble}] if answer.preamble else []
            content.append({"type": "tool_use", "id": answer.tool_use_id or fake._next_id("toolu"),
                            "name": "solution", "input": tool_input})
            exchange.chunk_times.append(time.monotonic())
            self._json(200, {"id": fake._next_id("msg"), "type": "message", "role": "assistant",
                             "model": body.get("model", fake.model), "content": content,
                             "stop_reason": answer.stop_reason, "stop_sequence": None,
                             "usage": _usage(answer, body)})

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(self, answer: Answer, body: dict, exchange: Exchange) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("request-id", fake._next_id("req"))
            for key, value in {**fake.limit_headers(), **answer.headers}.items():
                self.send_header(key, value)
            self.end_headers()
            if answer.first_byte_delay_s:
                time.sleep(answer.first_byte_delay_s)
            start_usage = {**_usage(answer, body), "output_tokens": 1}
            self._chunk(_sse("message_start", {"type": "message_start", "message": {
                "id": fake._next_id("msg"), "type": "message", "role": "assistant",
                "model": body.get("model", fake.model), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": start_usage}}))
            index = 0
            thought = self._thinking_blocks(answer)
            for block in thought:
                self._block(index, block)
                index += 1
            if answer.preamble:
                self._block(index, {"type": "text", "text": answer.preamble})
                index += 1
            if not answer.no_tool and not self._tool_use(answer, index, exchange, thought):
                return  # broken off (an error event, a dropped connection)
            self._chunk(_sse("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
                                               "usage": {"output_tokens": answer.usage.get("output_tokens", 0)}}))
            self._chunk(_sse("message_stop", {"type": "message_stop"}))
            self._chunk(b"")

        def _tool_use(self, answer: Answer, index: int, exchange: Exchange, thought: list[dict]) -> bool:
            """The solution tool_use block, its input in chunks; False when the stream was broken off."""
            tool_use_id = answer.tool_use_id or fake._next_id("toolu")
            if thought:
                fake.thought[tool_use_id] = thought
            self._chunk(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": tool_use_id, "name": "solution", "input": {}}}))
            self._chunk(_sse("ping", {"type": "ping"}))
            for sent, piece in enumerate(answer.chunks):
                if answer.cut_after is not None and sent >= answer.cut_after:
                    break  # the output limit: the block and the message end here (stop_reason says why)
                if answer.drop_after is not None and sent >= answer.drop_after:
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return False
                if answer.error_after is not None and sent >= answer.error_after:
                    self._error_event(answer)
                    return False
                if sent and answer.delay_s:
                    time.sleep(answer.delay_s)
                self._chunk(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "input_json_delta", "partial_json": piece}}))
                exchange.chunk_times.append(time.monotonic())
            if answer.error_after is not None and answer.cut_after is None:
                self._error_event(answer)
                return False
            self._chunk(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
            return True

        def _thinking_blocks(self, answer: Answer) -> list[dict]:
            """The answer's thinking blocks as the API gives them (signed), then its redacted ones."""
            blocks = [{"type": "thinking", "thinking": text, "signature": thinking_signature(text)}
                      for text in answer.thinking]
            blocks += [{"type": "redacted_thinking", "data": redacted_data(fake._next_id("redacted"))}
                       for _ in range(answer.redacted_thinking)]
            return blocks

        def _block(self, index: int, block: dict) -> None:
            """One whole content block as the API streams it: its start, its deltas, its stop."""
            kind = block["type"]
            if kind == "redacted_thinking":  # opaque: it comes whole with its start
                self._chunk(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                         "content_block": block}))
            elif kind == "thinking":
                self._chunk(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                         "content_block": {"type": "thinking", "thinking": "",
                                                                           "signature": ""}}))
                text = block["thinking"]
                for i in range(0, len(text), 24):
                    self._chunk(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                        "type": "thinking_delta", "thinking": text[i:i + 24]}}))
                self._chunk(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "signature_delta", "signature": block["signature"]}}))
            else:
                self._chunk(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                         "content_block": {"type": "text", "text": ""}}))
                self._chunk(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "text_delta", "text": block["text"]}}))
            self._chunk(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))

        def _error_event(self, answer: Answer) -> None:
            self._chunk(_sse("error", {"type": "error", "error": {"type": answer.error_type,
                                                                  "message": f"fake {answer.error_type}"}}))
            self._chunk(b"")

    return Handler


# ------------------------------------------------------------------------------- the Message Batches API
#
# `POST /v1/messages/batches` (create), `GET /v1/messages/batches/{id}` (retrieve), `GET .../{id}/results` (the
# results as JSONL), `POST .../{id}/cancel`, as the real API has them:
#
# * a batch holds 1 to 100,000 requests and its body at most 256 MB (413 `request_too_large` beyond); each request
#   is `{"custom_id", "params"}`, `custom_id` matching ``^[a-zA-Z0-9_-]{1,64}$`` and unique within the batch;
#   `params` may not ask to stream (the batch is refused with a 400 `invalid_request_error`);
# * a batch is `in_progress` (its `request_counts.processing` = its size, `results_url` null) until it ends, here
#   `delay_s` after its creation (`fake.batches.delay_s`); it is processed when it ends: each request checked as a
#   Messages request (`request_refusal`: an `errored` result with the refusal, the batch still succeeds) and
#   answered from the script as a plain Message (`succeeded`); `fake.batches.outcome = {custom_id: "expired" |
#   "canceled" | "errored"}` forces a request's result (once). Then `ended`, with its counts and its `results_url`;
# * results of a batch that has not ended are refused (400); they come in an order of their own (reversed here),
#   matched by `custom_id`;
# * cancel: an `in_progress` batch becomes `canceling` and ends at the next look, every request not processed
#   `canceled`; canceling an ended batch is refused (400).
#
# `fake.batches.created` lists the batches made (each with its `requests`), `fake.batches.answered` the requests
# answered (RecordedRequest, path `/v1/messages/batches#<custom_id>`).

BATCHES_PATH = "/v1/messages/batches"
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024


@dataclass
class FakeBatch:
    """One batch as the fake keeps it."""

    id: str
    requests: list[dict]
    created_at: datetime
    ends_at: float  # time.monotonic()
    status: str = "in_progress"
    ended_at: datetime | None = None
    cancel_initiated_at: datetime | None = None
    results: list[dict] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if self.status != "ended":
            counts["processing"] = len(self.requests)
            return counts
        for line in self.results:
            counts[line["result"]["type"]] += 1
        return counts


def _iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None


def _batch_error(status: int, message: str) -> tuple[int, dict, str]:
    kind = _ERROR_TYPES.get(status, "invalid_request_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fakebatch"}, \
        "json"


class FakeBatches:
    """The fake's Message Batches API (see the section's comment)."""

    def __init__(self, fake: FakeAnthropic) -> None:
        self.fake = fake
        self.delay_s = 0.5
        self.outcome: dict[str, str] = {}
        self.created: list[FakeBatch] = []
        self.answered: list[RecordedRequest] = []
        self.canceled: list[str] = []
        self._by_id: dict[str, FakeBatch] = {}
        self._lock = threading.Lock()

    def handle(self, method: str, path: str, raw: bytes) -> tuple[int, Any, str]:
        """(status, body, content type: "json" or a MIME type) of one request to the batches endpoints."""
        rest = path[len(BATCHES_PATH):].strip("/")
        parts = rest.split("/") if rest else []
        if method == "POST" and not parts:
            return self.create(raw)
        batch = self._by_id.get(parts[0]) if parts else None
        if batch is None:
            return _batch_error(404, f"batch {parts[0] if parts else ''!r} not found")
        if method == "GET" and len(parts) == 1:
            return 200, self.view(self._advance(batch)), "json"
        if method == "GET" and parts[1:] == ["results"]:
            return self.results(self._advance(batch))
        if method == "POST" and parts[1:] == ["cancel"]:
            return self.cancel(batch)
        return _batch_error(404, f"no such endpoint: {method} {path}")

    def create(self, raw: bytes) -> tuple[int, Any, str]:
        if len(raw) > MAX_BATCH_BYTES:
            return _batch_error(413, f"Request exceeds the maximum size of {MAX_BATCH_BYTES} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            return _batch_error(400, "request body is not valid JSON")
        refusal = _create_refusal(body)
        if refusal is not None:
            return _batch_error(400, refusal)
        with self._lock:
            batch = FakeBatch(self.fake._next_id("msgbatch"), body["requests"], datetime.now(UTC),
                              time.monotonic() + self.delay_s)
            self.created.append(batch)
            self._by_id[batch.id] = batch
        return 200, self.view(batch), "json"

    def view(self, batch: FakeBatch) -> dict[str, Any]:
        ended = batch.status == "ended"
        return {"id": batch.id, "type": "message_batch", "processing_status": batch.status,
                "request_counts": batch.counts(), "created_at": _iso(batch.created_at),
                "expires_at": _iso(batch.created_at + timedelta(hours=24)), "ended_at": _iso(batch.ended_at),
                "archived_at": None, "cancel_initiated_at": _iso(batch.cancel_initiated_at),
                "results_url": f"{self.fake.base_url}{BATCHES_PATH}/{batch.id}/results" if ended else None}

    def results(self, batch: FakeBatch) -> tuple[int, Any, str]:
        if batch.status != "ended":
            return _batch_error(400, f"Batch {batch.id} has not finished processing: its results are not ready")
        lines = "".join(json.dumps(line) + "\n" for line in reversed(batch.results))  # not in request order
        return 200, lines, "application/binary"

    def cancel(self, batch: FakeBatch) -> tuple[int, Any, str]:
        with self._lock:
            if batch.status == "ended":
                return _batch_error(400, f"Batch {batch.id} has ended: it cannot be canceled")
            if batch.status == "in_progress":
                batch.status = "canceling"
                batch.cancel_initiated_at = datetime.now(UTC)
                self.canceled.append(batch.id)
        return 200, self.view(batch), "json"

    def _advance(self, batch: FakeBatch) -> FakeBatch:
        """Process the batch once its time came (or it was canceled)."""
        with self._lock:
            if batch.status == "ended" or (batch.status == "in_progress" and time.monotonic() < batch.ends_at):
                return batch
            canceled = batch.status == "canceling"
            batch.results = [{"custom_id": entry["custom_id"], "result": self._result(entry, canceled)}
                             for entry in batch.requests]
            batch.status, batch.ended_at = "ended", datetime.now(UTC)
        return batch

    def _result(self, entry: dict, canceled: bool) -> dict[str, Any]:
        forced = self.outcome.pop(entry["custom_id"], None)  # once: a request sent again is answered
        if canceled or forced in ("canceled", "expired"):
            return {"type": "canceled" if canceled else str(forced)}
        if forced == "errored":
            return {"type": "errored", "error": {"type": "error", "error": {"type": "api_error",
                                                                           "message": "fake api_error"}}}
        params = entry["params"]
        request = RecordedRequest("POST", f"{BATCHES_PATH}#{entry['custom_id']}", {}, params,
                                  json.dumps(params).encode(), time.monotonic())
        refusal = request_refusal(params) if self.fake.check_requests else None
        if refusal is not None:
            self.fake._refuse(request, refusal)
            return {"type": "errored", "error": {"type": "error", "error": {"type": "invalid_request_error",
                                                                           "message": refusal}}}
        answer = self.fake._next_answer(request)
        self.answered.append(request)
        if answer is None or answer.status != 200:
            error = (answer.body or {}).get("error") if answer is not None else {
                "type": "api_error", "message": "fake Anthropic server: no answer was scripted for this request"}
            return {"type": "errored", "error": {"type": "error", "error": error}}
        return {"type": "succeeded", "message": _plain_message(self.fake, answer, params)}


def _create_refusal(body: Any) -> str | None:
    """Why the real API refuses a batch creation (400), or None."""
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        return "requests: List should have at least 1 item after validation, not 0"
    if len(requests) > MAX_BATCH_REQUESTS:
        return f"requests: List should have at most {MAX_BATCH_REQUESTS} items after validation, not {len(requests)}"
    seen: set[str] = set()
    for i, entry in enumerate(requests):
        if not isinstance(entry, dict) or not isinstance(entry.get("params"), dict):
            return f"requests.{i}.params: Field required"
        cid = entry.get("custom_id")
        if not isinstance(cid, str) or not _CUSTOM_ID.match(cid):
            return f"requests.{i}.custom_id: String should match pattern '{_CUSTOM_ID.pattern}'"
        if cid in seen:
            return f"requests: custom_id values must be unique within a batch; {cid!r} is repeated"
        seen.add(cid)
        if "stream" in entry["params"]:
            return f"requests.{i}.params.stream: Extra inputs are not permitted"
    return None


def _plain_message(fake: FakeAnthropic, answer: Answer, params: dict) -> dict[str, Any]:
    """A scripted answer as a non-streamed Message: its signed thinking blocks, its text, its solution tool_use
    (none for a `no_tool` answer)."""
    try:
        tool_input = json.loads(answer.text_of_solution)
    except ValueError:
        tool_input = {}
    content: list[dict] = [{"type": "thinking", "thinking": text, "signature": thinking_signature(text)}
                           for text in answer.thinking]
    content += [{"type": "redacted_thinking", "data": redacted_data(fake._next_id("redacted"))}
                for _ in range(answer.redacted_thinking)]
    if answer.preamble:
        content.append({"type": "text", "text": answer.preamble})
    if not answer.no_tool:
        content.append({"type": "tool_use", "id": answer.tool_use_id or fake._next_id("toolu"), "name": "solution",
                        "input": tool_input})
    return {"id": fake._next_id("msg"), "type": "message", "role": "assistant", "model": params.get("model",
            fake.model), "content": content, "stop_reason": answer.stop_reason, "stop_sequence": None,
            "usage": _usage(answer, params)}


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A started :class:`FakeAnthropic`, stopped after the test. A request it refused fails the test (at its
    teardown) unless the test set ``refusals_expected``: agentq must never send what the real API refuses."""
    with FakeAnthropic() as fake:
        yield fake
    if fake.refusals and not fake.refusals_expected:
        pytest.fail("the fake Messages API refused what agentq sent: " + "; ".join(m for _, m in fake.refusals))


@pytest.fixture
def anthropic_env(fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> FakeAnthropic:
    """The fake server, with ``ANTHROPIC_BASE_URL`` pointing at it and a fake ``ANTHROPIC_API_KEY`` set."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return fake_anthropic
