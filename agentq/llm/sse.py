"""The server-sent events of a streamed Messages API answer, read straight from its HTTP body
(`sdk.events`).

The SDK reads a stream's body through six generators a piece (its SSE decoder's ``iter_bytes`` and
``_iter_chunks``, then httpx's ``iter_bytes``, ``iter_raw`` and its stream's wrappers) and decodes each line of
each event apart (``SSEDecoder.decode``); per piece that was a third of the CPU the body took, every piece of every
answer a dispatcher holds. Here the body's pieces are taken from the response's own stream (httpx's transport,
whose transport errors are mapped as before) and split on the blank line that ends an event, each event's lines
read as the SDK's decoder reads them (``event:``, ``data:`` joined by newlines, comments and ``id``/``retry``
ignored: agentq uses neither).

What the SDK's decoder does is done instead (`sdk_events`) when this reading could differ from it: a body with a
content encoding (httpx would decode it), a client whose SSE decoder is not the SDK's own, or a body with a
carriage return (a line end that this split does not know; from there on the SDK's decoder reads the rest).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple


class Event(NamedTuple):
    """One server-sent event: its name (None when it has none) and its data lines joined."""

    event: str | None
    data: str


def sse_events(stream: Any) -> Iterator[Event]:
    """The events of the SDK's `stream` (an ``anthropic.Stream``), in order, as its decoder would yield them."""
    from anthropic._streaming import SSEDecoder

    response = stream.response
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if type(getattr(stream, "_decoder", None)) is not SSEDecoder or encoding not in ("", "identity") \
            or response.is_stream_consumed:
        yield from sdk_events(stream._iter_events())
        return
    response.is_stream_consumed = True  # as httpx's own reading marks it
    body = iter(response.stream)
    pending = b""
    for piece in body:
        if b"\r" in piece:  # a line end this split does not know: the SDK's decoder reads the rest
            yield from sdk_events(SSEDecoder().iter_bytes(itertools.chain((pending, piece), body)))
            return
        pending += piece
        end = pending.find(b"\n\n")
        while end >= 0:
            event = _event(pending[:end])
            if event is not None:
                yield event
            pending = pending[end + 2:]
            end = pending.find(b"\n\n")
    # an event the body ended before its blank line is dropped, as the SDK's decoder drops it


def sdk_events(sses: Iterator[Any]) -> Iterator[Event]:
    """The SDK decoder's events (``ServerSentEvent``) as :class:`Event`."""
    for sse in sses:
        yield Event(sse.event, sse.data)


# one SSE block, parsed as the standard says (fields, comments, repeated data lines), with the API's own two-line
# shape taken first: splitting it apart would cost every event the general path
def _event(block: bytes) -> Event | None:
    """One event's lines (without the blank line that ended it); None when it has no name and no data."""
    head, _, rest = block.partition(b"\n")
    if head.startswith(b"event: ") and rest.startswith(b"data: ") and b"\n" not in rest:  # what the API sends
        return Event(head[7:].decode("utf-8"), rest[6:].decode("utf-8"))
    name: str | None = None
    data: list[str] = []
    seen = False
    for raw in block.split(b"\n"):
        line = raw.decode("utf-8")
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            name, seen = value, True
        elif field == "data":
            data.append(value)
            seen = True
        elif field in ("id", "retry"):
            seen = True
    return Event(name, "\n".join(data)) if seen else None


__all__ = ["Event", "sdk_events", "sse_events"]
