"""The ``anthropic`` SDK's side of the Anthropic provider (`llm/anthropic.py`): the one client a process shares,
how a request goes out, and a canned answer that loads the SDK before a process's first requests.

``anthropic`` is imported when first used, never at import time.
"""

from __future__ import annotations

import json
from typing import Any, cast

from agentq.errors import LLMError
from agentq.llm.base import SOLUTION_TOOL_NAME


def make_client(*, api_key: str | None, base_url: str | None, timeout_s: float, max_retries: int,
                connections: int) -> Any:
    """An ``anthropic.Anthropic`` for every thread of the process, its HTTP client keeping a connection alive per
    stream the process may hold at once (`connections`)."""
    try:
        import anthropic
    except ImportError as exc:  # pragma: no cover - anthropic is a dependency
        raise LLMError("the anthropic package is not installed") from exc
    kwargs: dict[str, Any] = {"timeout": timeout_s, "max_retries": max_retries}
    if api_key is not None:
        kwargs["api_key"] = api_key
    if base_url is not None:
        kwargs["base_url"] = base_url
    try:
        limits = _httpx().Limits(max_connections=max(1000, connections), max_keepalive_connections=connections)
        return anthropic.Anthropic(**kwargs, http_client=anthropic.DefaultHttpxClient(limits=limits))
    except Exception as exc:  # the SDK raises on missing credentials and bad settings
        raise LLMError(f"cannot create the Anthropic client: {exc}") from exc


def post(client: Any, params: dict[str, Any]) -> Any:
    """Send a streamed Messages API request with the body `params`, serialized here once: the SDK's
    ``messages.create`` first copies the whole body (every block of every turn), a cost that grows with each turn
    of a long conversation. The stream is the SDK's own, as ``messages.create`` returns it."""
    from anthropic import Stream
    from anthropic.types import Message, RawMessageStreamEvent

    body = json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()
    return client.post("/v1/messages", cast_to=Message, content=body, stream=True,
                       stream_cls=Stream[RawMessageStreamEvent])


def canned_stream(client: Any) -> Any:
    """The SDK's stream over one canned answer (no request is made)."""
    import anthropic
    from anthropic.types import RawMessageStreamEvent

    httpx = _httpx()
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_CANNED_STREAM,
                              request=httpx.Request("POST", "http://127.0.0.1/v1/messages"))
    return anthropic.Stream(cast_to=cast(Any, RawMessageStreamEvent), response=response, client=client)


def _httpx() -> Any:
    """The HTTP library of the installed SDK."""
    import httpx2

    return httpx2


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


_CANNED_EVENTS: tuple[dict[str, Any], ...] = (
    {"type": "message_start", "message": {"id": "msg_0", "type": "message", "role": "assistant", "model": "m",
                                          "content": [], "stop_reason": None, "stop_sequence": None,
                                          "usage": {"input_tokens": 1, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "tool_use", "id": "toolu_0", "name": SOLUTION_TOOL_NAME, "input": {}}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"calls":[]}'}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
)
_CANNED_STREAM = b"".join(_sse(event["type"], event) for event in _CANNED_EVENTS)
"""One answer as the API streams it (`canned_stream`)."""


__all__ = ["canned_stream", "make_client", "post"]
