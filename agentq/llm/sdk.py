"""The ``anthropic`` SDK's side of the Anthropic provider (`llm/anthropic.py`): the one client a process shares,
how a request goes out, how its stream's events are read, and a canned answer that loads the SDK before a
process's first requests.

``anthropic`` is imported when first used, never at import time.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any, cast

from agentq.errors import LLMError
from agentq.llm.base import SOLUTION_TOOL_NAME
from agentq.llm.send import Template, direct, send
from agentq.llm.sse import Event, sse_events

log = logging.getLogger(__name__)


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
        return anthropic.Anthropic(**kwargs, http_client=http_client(connections))
    except Exception as exc:  # the SDK raises on missing credentials and bad settings
        raise LLMError(f"cannot create the Anthropic client: {exc}") from exc


def http_client(connections: int, *, like: Any = None) -> Any:
    """The SDK's HTTP client (its defaults), keeping `connections` alive; `like`: an SDK client whose TLS settings
    (its SSL context, about 50 ms of CPU to build) the new one shares."""
    import anthropic

    limits = _httpx().Limits(max_connections=max(1000, connections), max_keepalive_connections=connections)
    pool = getattr(getattr(getattr(like, "_client", None), "_transport", None), "_pool", None)
    context = getattr(pool, "_ssl_context", None)
    if context is None:
        return anthropic.DefaultHttpxClient(limits=limits)
    return anthropic.DefaultHttpxClient(limits=limits, verify=context)


PER_SHARD = 16
"""Threads (and connections kept alive) per HTTP connection pool of a process's SDK clients (`Shards`)."""


def shard_count(connections: int) -> int:
    return max(1, -(-connections // PER_SHARD))


class Shards:
    """`count` copies of one SDK client that differ in their HTTP connection pool only, each for a share of the
    threads of the process (a thread keeps to the one it first used).

    A pool does work in proportion to its connections at every request and every answer's end, under one lock:
    it looks at each connection and asks the kernel whether each idle one was closed. One pool for the 256
    streams of a dispatcher made that a few hundred checks per request, by all its threads in turn; a pool per
    sixteen threads makes it sixteen, with as many connections kept alive in all."""

    def __init__(self, client: Any, *, count: int, connections: int) -> None:
        self.connections = connections  # kept alive by each copy
        self._clients: list[Any] = [client] + [None] * (count - 1)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._next = itertools.count()

    def client(self) -> Any:
        """This thread's client."""
        index = getattr(self._local, "index", None)
        if index is None:
            index = self._local.index = next(self._next) % len(self._clients)
        return self._copy(index)

    def make_all(self) -> None:
        """Make every copy now (a dispatcher about to start: see `AnthropicLLM.prepare`), so that no request waits
        on one being made between taking its share of the model's rate limits and being sent."""
        for index in range(1, len(self._clients)):
            self._copy(index)

    def _copy(self, index: int) -> Any:
        """The copy `index`, made on first use."""
        client = self._clients[index]
        if client is None:
            with self._lock:
                client = self._clients[index]
                if client is None:
                    base = self._clients[0]
                    client = base.with_options(http_client=http_client(self.connections, like=base))
                    self._clients[index] = client
        return client

    def copies(self) -> list[Any]:
        """The copies made so far (not the client given)."""
        with self._lock:
            return [client for client in self._clients[1:] if client is not None]


def post(client: Any, params: dict[str, Any]) -> Any:
    """Send a streamed Messages API request with the body `params`, serialized here once: the SDK's
    ``messages.create`` first copies the whole body (every block of every turn), a cost that grows with each turn
    of a long conversation. The stream is the SDK's own, as ``messages.create`` returns it; the request is the one
    the SDK would build, built once per client where nothing in it can differ (`send.py`)."""
    body = json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()
    template = _template(client)
    if template is not None:
        return send(client, template, body)
    from anthropic import Stream
    from anthropic.types import Message, RawMessageStreamEvent

    return client.post("/v1/messages", cast_to=Message, content=body, stream=True,
                       stream_cls=Stream[RawMessageStreamEvent])


_TEMPLATES: weakref.WeakKeyDictionary[Any, Template | None] = weakref.WeakKeyDictionary()
_TEMPLATES_LOCK = threading.Lock()


def _template(client: Any) -> Template | None:
    """`client`'s request template (`send.Template`), made on its first request (or by `prepare_requests`); None
    when its requests go through the SDK's ``post``."""
    try:
        return _TEMPLATES[client]
    except KeyError:
        pass
    with _TEMPLATES_LOCK:
        if client not in _TEMPLATES:
            _TEMPLATES[client] = _made_template(client)
        return _TEMPLATES[client]


def _made_template(client: Any) -> Template | None:
    """A template for `client`, or None when its requests go through ``post``: a client that is not plain, or an
    SDK release whose internals the template reads differ from the ones it was written against (they are private,
    so a change there must cost speed, never a request)."""
    try:
        return Template(client) if direct(client) else None
    except (AttributeError, TypeError):
        log.warning("anthropic %s: requests go through the SDK's post (its request internals differ)",
                    _sdk_version(), exc_info=True)
        return None


def _sdk_version() -> str:
    import anthropic

    return str(getattr(anthropic, "__version__", "?"))


def prepare_requests(clients: list[Any]) -> None:
    """Make the request templates of `clients` now (a dispatcher about to start: see `AnthropicLLM.prepare`)."""
    for client in clients:
        _template(client)


class Fields(dict):
    """A JSON object of a stream event whose keys also read as attributes (``event.delta.partial_json``), as the
    SDK's event models do; a key it does not have is an ``AttributeError``, so ``getattr(x, key, default)`` reads
    an absent field as the model's default would."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


_EVENT_JSON = json.JSONDecoder(object_hook=Fields)


def events(stream: Any) -> Iterator[Fields]:
    """The events of the SDK's `stream`, as iterating it yields them, each one its JSON as :class:`Fields`: the
    SDK's server-sent-event decoder reads the body, and the same events are skipped (``ping``, unnamed, empty) and
    an ``error`` event raises the same ``APIStatusError``. What is not done is the SDK's construction of a pydantic
    model per event, which was a fifth of the CPU of a streamed answer (15 events for 10 pieces of a solution), a
    cost paid for every piece of every answer a dispatcher holds; nor its layers of generators over the body
    (`sse.sse_events`). The response is closed at the end, as the SDK closes it."""
    response = stream.response
    try:
        for sse in sse_events(stream):
            if sse.event is None or sse.event == "ping":
                continue
            if sse.event == "error":
                raise _stream_error(stream, sse)
            if sse.data:
                yield _EVENT_JSON.decode(sse.data)
    finally:
        response.close()


def _stream_error(stream: Any, sse: Event) -> Exception:
    """The exception the SDK raises for an ``error`` event (`anthropic.Stream.__stream__`)."""
    body: Any = sse.data
    try:
        body = json.loads(sse.data)
        message = f"{body}"
    except Exception:
        message = sse.data or f"Error code: {stream.response.status_code}"
    return cast(Exception, stream._client._make_status_error(message, body=body, response=stream.response))


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


__all__ = ["PER_SHARD", "Fields", "Shards", "canned_stream", "events", "http_client", "make_client", "post",
           "prepare_requests", "shard_count"]
