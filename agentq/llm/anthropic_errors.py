"""The Anthropic provider's errors: every SDK and transport exception mapped into agentq's, and the response
headers that go with them (``retry-after``, ``anthropic-ratelimit-*``).

Transient ones (429, 408, 5xx, 529 overloaded, connection errors and timeouts, an ``error`` event or a cut in the
middle of the stream) become :class:`LLMRetryableError` with the provider's ``retry-after``; a 400 "prompt is too
long" a :class:`ContextWindowExceeded`; everything else :class:`LLMError`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from agentq.errors import ContextWindowExceeded, LLMError, LLMRetryableError
from agentq.llm.base import RateLimits

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})
_SHOULD_RETRY: dict[Any, bool] = {"true": True, "false": False}  # the x-should-retry header


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
    if status == 400:
        return _bad_request(exc)
    return LLMError(_status_text(exc))


def _bad_request(exc: Any) -> LLMError:
    """A 400: the context window's refusal (with the window and the prompt's tokens it states), or any other."""
    message = str(exc.api_message or exc.message or "")
    if PROMPT_TOO_LONG in message.lower():
        prompt_tokens, window = refused_window(message)
        return ContextWindowExceeded(_status_text(exc), window=window, prompt_tokens=prompt_tokens)
    return LLMError(_status_text(exc))


PROMPT_TOO_LONG = "prompt is too long"
"""What the API's 400 says of a request longer than the model's context window."""

_TOO_LONG = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum", re.IGNORECASE)


def refused_window(message: str) -> tuple[int | None, int | None]:
    """The prompt's tokens and the model's context window the API's refusal states ("prompt is too long: 215384
    tokens > 200000 maximum"); (None, None) when it states neither."""
    found = _TOO_LONG.search(message)
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)


def _retryable(exc: Any, status: int, headers: Any) -> bool:
    """Whether an error status is worth another attempt: as `x-should-retry` says when the API sent it, else by
    the status (429, 5xx, ...) or the error's type."""
    should = headers.get("x-should-retry") if headers is not None else None
    retryable = _SHOULD_RETRY.get(should)
    if retryable is not None:
        return retryable
    return status in _RETRYABLE_STATUS or status >= 500 or (exc.type in _RETRYABLE_TYPES and status != 400)

