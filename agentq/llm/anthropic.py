"""The Anthropic provider: one streamed Messages API request per :class:`LLMRequest` (SPEC §13).

The request forces the one ``solution`` tool (``eager_input_streaming``, cached), sends the system texts as
blocks with ``cache_control`` on the last one, and reads the raw event stream: the tool input's
``input_json_delta`` pieces go through a :class:`CallReporter`, so each complete element of ``calls`` is
reported while the model is still writing the rest.

With thinking on (``LLMRequest.thinking``) the tool is offered instead (``tool_choice: auto``: the API refuses a
forced tool with thinking), and the answer's ``thinking`` / ``redacted_thinking`` blocks (``thinking_delta`` and
``signature_delta`` pieces) are kept exactly as they came, to go back unchanged. The stop reason decides what
the answer is (SPEC §16): ``max_tokens`` a cut one (``LLMAnswer.truncated``), ``refusal`` a
:class:`ModelRefused` with the model's text, ``model_context_window_exceeded`` (like a 400 "prompt is too long")
a :class:`ContextWindowExceeded`, any reason not in :data:`KNOWN_STOP_REASONS` an :class:`UnknownStopReason`.

Every SDK and transport exception is mapped here: transient ones (429, 408, 5xx, 529 overloaded, connection
errors and timeouts, an ``error`` event or a cut in the middle of the stream) become
:class:`LLMRetryableError` with the provider's ``retry-after``; everything else :class:`LLMError`. The SDK's
own retries are off by default: the runtime schedules the next attempt without holding a worker slot.

``anthropic`` is imported when the first request is made, never at import time.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from agentq.errors import (
    ContextWindowExceeded,
    LLMError,
    LLMRetryableError,
    ModelRefused,
    UnknownStopReason,
)
from agentq.llm.base import (
    SOLUTION_TOOL_DESCRIPTION,
    SOLUTION_TOOL_NAME,
    LLMAnswer,
    LLMRequest,
    OnCall,
    RateLimits,
    Usage,
)
from agentq.llm.scanner import CallReporter
from agentq.llm.sdk import canned_stream, events, make_client, post
from agentq.protocol.thinking import fitted

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})
_SHOULD_RETRY: dict[Any, bool] = {"true": True, "false": False}  # the x-should-retry header
DEFAULT_CONNECTIONS = 100  # the SDK's own number of connections kept alive


def request_params(request: LLMRequest) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.create`` for ``request`` (the JSON body, SPEC §13). Every cache
    breakpoint carries the request's TTL (``options.cache_ttl``, SPEC §16), always explicit."""
    system: list[dict[str, Any]] = [{"type": "text", "text": text} for text in request.system]
    if system:
        system[-1]["cache_control"] = cache_control(request.cache_ttl)
    tool = {
        "name": SOLUTION_TOOL_NAME,
        "description": SOLUTION_TOOL_DESCRIPTION,
        "input_schema": request.solution_schema,
        "eager_input_streaming": True,
        "cache_control": cache_control(request.cache_ttl),
    }
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _cached_conversation(request.messages, request.cache_ttl),
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": SOLUTION_TOOL_NAME},
        "stream": True,
    }
    thinking = fitted(request.thinking, request.max_tokens)  # a budget may have lowered max_tokens
    if thinking:  # the API refuses a forced tool with thinking: the tool is offered (SPEC §16)
        params["thinking"] = thinking
        params["tool_choice"] = {"type": "auto"}
    if system:
        params["system"] = system
    return params


def cache_control(ttl: str) -> dict[str, str]:
    """A prompt-cache breakpoint with its TTL ("5m" or "1h")."""
    return {"type": "ephemeral", "ttl": ttl}


def _cached_conversation(messages: tuple[dict, ...], ttl: str) -> list[dict]:
    """The messages with a cache breakpoint on the last block of the last turn: the conversation grows
    append-only, so the next request reads this whole prefix from the cache (the third of the API's four
    breakpoints, after the tool and the system). The request's own turns are not changed."""
    turns = list(messages)
    if not turns or not isinstance(turns[-1].get("content"), list) or not turns[-1]["content"]:
        return turns
    last = dict(turns[-1])
    blocks = list(last["content"])
    blocks[-1] = {**blocks[-1], "cache_control": cache_control(ttl)}
    last["content"] = blocks
    turns[-1] = last
    return turns


_RATE_LIMIT_KINDS = ("requests", "input-tokens", "output-tokens")  # the order of `protocol/limits.py` KINDS


def rate_limits_of(headers: Mapping[str, str] | None) -> RateLimits | None:
    """What the `anthropic-ratelimit-<kind>-limit` and `-remaining` headers say (None: none of them came)."""
    if not headers:
        return None

    def number(name: str) -> int | None:
        value = headers.get(name)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    requests, inputs, outputs = (f"anthropic-ratelimit-{kind}" for kind in _RATE_LIMIT_KINDS)
    limits = (number(f"{requests}-limit"), number(f"{inputs}-limit"), number(f"{outputs}-limit"))
    remaining = (number(f"{requests}-remaining"), number(f"{inputs}-remaining"), number(f"{outputs}-remaining"))
    if all(v is None for v in (*limits, *remaining)):
        return None
    return RateLimits(limits=limits, remaining=remaining)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date); None if absent."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class AnthropicLLM:
    """The :class:`~agentq.llm.base.LLM` backed by the official ``anthropic`` SDK.

    ``api_key`` and ``base_url`` default to what the SDK reads (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``).
    ``client`` may be given ready-made (an ``anthropic.Anthropic``); otherwise one is made on first use and
    shared by the threads of this process.
    """

    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, timeout_s: float = 600.0,
                 max_retries: int = 0, client: Any = None, connections: int = DEFAULT_CONNECTIONS) -> None:
        self.api_key = api_key
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.connections = connections  # streams this process may hold at once (its engine threads)
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        return make_client(api_key=self.api_key, base_url=self.base_url, timeout_s=self.timeout_s,
                           max_retries=self.max_retries, connections=self.connections)

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        """Stream one answer; ``on_call(index, call)`` runs for each complete ``calls`` element as it arrives."""
        client = self.client
        try:
            stream = post(client, request_params(request))
        except Exception as exc:
            raise map_error(exc) from exc
        try:
            return replace(_read(stream, on_call), rate_limits=rate_limits_of(_headers(stream)))
        finally:
            try:
                stream.close()
            except Exception:  # closing a broken connection must not hide the real outcome
                log.debug("closing the Anthropic stream failed", exc_info=True)

    def prepare(self) -> None:
        """Make the client and read one canned answer through the SDK's stream, so that a process about to start
        many requests at once does not have each of them wait on the SDK's import and its types' first build."""
        _read(canned_stream(self.client), None)

    def close(self) -> None:
        """Release the HTTP connections of the client made by this provider."""
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                log.debug("closing the Anthropic client failed", exc_info=True)


def _headers(stream: Any) -> Mapping[str, str] | None:
    response = getattr(stream, "response", None)
    return getattr(response, "headers", None)


class _StreamState:
    """What the stream has said so far about the solution block, the other blocks and the usage."""

    def __init__(self, on_call: OnCall | None) -> None:
        self.reporter = CallReporter(on_call)
        self.block_index: int | None = None
        self.tool_use_id = ""
        self.start_input: Any = None
        self.stopped = False
        self.stop_reason: str | None = None
        self.blocks: dict[int, dict[str, Any]] = {}  # thinking, redacted_thinking and text blocks, by index
        self.usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}

    def take_usage(self, usage: Any) -> None:
        """Counts are cumulative (message_start, then message_delta): keep the largest seen. The cache writes'
        split by TTL is the usage's ``cache_creation`` object."""
        split = getattr(usage, "cache_creation", None)
        for key in self.usage:
            value = getattr(split if key.startswith("ephemeral_") else usage, key, None)
            if isinstance(value, int) and value > self.usage[key]:
                self.usage[key] = value

    def handle(self, event: Any) -> None:
        match getattr(event, "type", None):
            case "message_start":
                self.take_usage(getattr(event.message, "usage", None))
            case "content_block_start":
                self._block_started(event.index, event.content_block)
            case "content_block_delta":
                self._block_delta(event.index, event.delta)
            case "message_delta":
                self.take_usage(getattr(event, "usage", None))
                self.stop_reason = getattr(event.delta, "stop_reason", None) or self.stop_reason
            case "message_stop":
                self.stopped = True

    def _block_started(self, index: int, block: Any) -> None:
        """The first call of the solution tool is the answer (its input streams in the block's deltas); thinking
        and text blocks are kept as the API will want them back."""
        kind = getattr(block, "type", None)
        if kind == "tool_use" and getattr(block, "name", None) == SOLUTION_TOOL_NAME and self.block_index is None:
            self.block_index = index
            self.tool_use_id = block.id
            self.start_input = getattr(block, "input", None)
        elif kind in _KEPT_BLOCKS:  # in the API's own key order, so they go back byte for byte
            self.blocks[index] = {"type": kind, **{key: getattr(block, key, "") or "" for key in _KEPT_BLOCKS[kind]}}

    def _block_delta(self, index: int, delta: Any) -> None:
        kind = getattr(delta, "type", None)
        if index == self.block_index and kind == "input_json_delta":
            self.reporter.feed(delta.partial_json or "")
        elif index in self.blocks and kind in _DELTA_FIELDS:
            field = _DELTA_FIELDS[kind]
            self.blocks[index][field] += getattr(delta, field, "") or ""

    def thinking_blocks(self) -> tuple[dict, ...]:
        """The thinking and redacted thinking blocks, in the order they came (signatures included); a thinking
        block the output limit cut before its signature came is left out (the API would refuse it unsigned)."""
        return tuple(block for _, block in sorted(self.blocks.items())
                     if block["type"] == "redacted_thinking" or (block["type"] == "thinking" and block["signature"]))

    def text(self) -> str:
        """What the model wrote outside its tool call."""
        return "\n\n".join(b["text"] for i, b in sorted(self.blocks.items()) if b["type"] == "text" and b["text"])


_KEPT_BLOCKS = {"thinking": ("thinking", "signature"), "redacted_thinking": ("data",), "text": ("text",)}
_DELTA_FIELDS = {"thinking_delta": "thinking", "signature_delta": "signature", "text_delta": "text"}

KNOWN_STOP_REASONS = frozenset({"tool_use", "end_turn", "stop_sequence", "max_tokens", "refusal",
                                "model_context_window_exceeded"})
"""The stop reasons agentq acts on (SPEC §16); any other is an :class:`UnknownStopReason`."""


def _events(stream: Any) -> Iterator[Any]:
    """The stream's events (their JSON, `sdk.events`), with every SDK or transport exception mapped into agentq's
    errors."""
    iterator = events(stream)
    while True:
        try:
            event = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            raise map_error(exc, mid_stream=True) from exc
        yield event


def _read(stream: Any, on_call: OnCall | None) -> LLMAnswer:
    state = _StreamState(on_call)
    for event in _events(stream):
        state.handle(event)  # on_call's own exceptions propagate unchanged
    if not state.stopped:
        raise LLMRetryableError("the Anthropic stream ended before message_stop")
    usage = Usage(requests=1, **state.usage)
    _check_stop(state.stop_reason, state.text(), usage)
    if state.block_index is None:  # no solution (thinking on, or cut before it): the engine sends it back
        return LLMAnswer(solution=None, raw="", tool_use_id="", usage=usage, stop_reason=state.stop_reason,
                         blocks=state.thinking_blocks(), text=state.text())
    raw = state.reporter.text or _whole_input(state.start_input, on_call)
    try:
        solution = json.loads(raw) if raw.strip() else {}
    except ValueError:
        solution = None
    return LLMAnswer(solution=solution, raw=raw, tool_use_id=state.tool_use_id, usage=usage,
                     stop_reason=state.stop_reason, blocks=state.thinking_blocks(), text=state.text())


def _check_stop(stop_reason: str | None, text: str, usage: Usage) -> None:
    """Raise for a stop reason whose answer cannot be used (SPEC §16): a refusal (with the model's text), a full
    context window, a reason agentq does not know. No stop reason at all is taken as the end of the answer."""
    if stop_reason is None or stop_reason in KNOWN_STOP_REASONS - {"refusal", "model_context_window_exceeded"}:
        return
    if stop_reason == "refusal":
        raise ModelRefused(text or "the model declined to answer (stop_reason refusal)", usage=usage,
                           stop_reason=stop_reason)
    if stop_reason == "model_context_window_exceeded":
        raise ContextWindowExceeded("the model's context window is full (stop_reason model_context_window_exceeded)",
                                    usage=usage, stop_reason=stop_reason)
    raise UnknownStopReason(f"the model stopped for a reason agentq does not know: stop_reason {stop_reason!r}",
                            usage=usage, stop_reason=stop_reason)


def _whole_input(start_input: Any, on_call: OnCall | None) -> str:
    """The solution of a tool call whose input came whole with its block's start (no deltas streamed it): its
    JSON, its calls handed to `on_call` now ("" when there was none)."""
    if not start_input:
        return ""
    for index, call in enumerate((start_input or {}).get("calls") or ()):
        if isinstance(call, dict) and on_call is not None:
            on_call(index, call)
    return json.dumps(start_input, ensure_ascii=False)


def _status_text(exc: Any) -> str:
    status = getattr(exc, "status_code", None)
    kind = getattr(exc, "type", None) or "error"
    message = getattr(exc, "api_message", None) or getattr(exc, "message", None) or str(exc)
    return f"Anthropic API {status} {kind}: {message}"


_ErrorMap = tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Callable[[Any], LLMError]], ...]


def map_error(exc: BaseException, *, mid_stream: bool = False) -> LLMError:
    """agentq's error for an exception raised by the SDK or its HTTP transport: the first entry of the
    boundary's map (the request's, or the stream's) that ``exc`` is an instance of says which."""
    if isinstance(exc, LLMError):
        return exc
    try:
        table = _error_map(mid_stream)
    except ImportError:  # pragma: no cover
        return LLMError(f"Anthropic request failed: {exc!r}")
    for kind, error in table:
        if isinstance(exc, kind):
            return error(exc)
    return LLMError(f"Anthropic request failed: {type(exc).__name__}: {exc}")


@functools.cache
def _error_map(mid_stream: bool) -> _ErrorMap:
    """The map at the request boundary, or (``mid_stream``) while its events are read, where a
    ``ValueError`` is a malformed server-sent event."""
    import anthropic
    import httpx2

    transport: _ErrorMap = (
        (anthropic.APIStatusError, _status_error),
        (anthropic.APITimeoutError, lambda exc: LLMRetryableError("Anthropic API request timed out")),
        (anthropic.APIConnectionError,
         lambda exc: LLMRetryableError(f"cannot reach the Anthropic API: {exc.__cause__ or exc}")),
        (anthropic.APIResponseValidationError,
         lambda exc: LLMError(f"the Anthropic API answered something unexpected: {exc}")),
        (httpx2.TimeoutException, lambda exc: LLMRetryableError(f"Anthropic stream timed out: {exc!r}")),
        (httpx2.TransportError, lambda exc: LLMRetryableError(f"Anthropic stream broken: {exc!r}")),
        ((httpx2.HTTPError, httpx2.StreamError), lambda exc: LLMRetryableError(f"Anthropic stream failed: {exc!r}")),
    )
    stream: _ErrorMap = ((ValueError, lambda exc: LLMRetryableError(f"malformed Anthropic stream: {exc}")),)
    sdk: _ErrorMap = ((anthropic.AnthropicError, lambda exc: LLMError(f"Anthropic request failed: {exc}")),)
    return transport + stream + sdk if mid_stream else transport + sdk


def _status_error(exc: Any) -> LLMError:
    """An HTTP error status, or an ``error`` event inside a 200 stream; ``x-should-retry`` has the last word."""
    status = exc.status_code
    headers = exc.response.headers if exc.response is not None else None
    retry_after = parse_retry_after(headers)
    if status == 200:
        return LLMRetryableError(f"Anthropic stream error event: {exc.type or 'error'}: "
                                 f"{exc.api_message or exc.message}", retry_after_s=retry_after, status=status)
    if _retryable(exc, status, headers):
        return LLMRetryableError(_status_text(exc), retry_after_s=retry_after, status=status,
                                 rate_limits=rate_limits_of(headers))
    if status == 400 and PROMPT_TOO_LONG in str(exc.api_message or exc.message or "").lower():
        return ContextWindowExceeded(_status_text(exc))
    return LLMError(_status_text(exc))


PROMPT_TOO_LONG = "prompt is too long"
"""What the API's 400 says of a request longer than the model's context window."""


def _retryable(exc: Any, status: int, headers: Any) -> bool:
    """Whether an error status is worth another attempt: as `x-should-retry` says when the API sent it, else by
    the status (429, 5xx, ...) or the error's type."""
    should = headers.get("x-should-retry") if headers is not None else None
    retryable = _SHOULD_RETRY.get(should)
    if retryable is not None:
        return retryable
    return status in _RETRYABLE_STATUS or status >= 500 or (exc.type in _RETRYABLE_TYPES and status != 400)


__all__ = ["KNOWN_STOP_REASONS", "PROMPT_TOO_LONG", "AnthropicLLM", "cache_control",
           "map_error", "parse_retry_after", "request_params"]
