"""Sending one streamed Messages API request through an SDK client's own HTTP client, its request built from a
template (`sdk.post`).

The SDK builds every request from scratch: it copies its options (a pydantic model) three times, merges its
headers layer by layer into a new ``Headers``, parses its base URL again and joins the path to it, and looks up
middleware, telemetry and retries; that was about as much CPU as sending the request and reading its answer's
headers. For a client where none of that can differ from one request to the next — the SDK's own
``anthropic.Anthropic`` with no middleware, no token auth, no idempotency header and its retries off
(agentq's default: the runtime retries) — the SDK builds its request once (`Template`); each request is then that
URL, those headers and timeouts and its own body, sent by the client's HTTP client as the SDK sends it, its
answer's status and transport errors raised as the SDK raises them (``APIStatusError`` from the body of an
error status, ``APITimeoutError``, ``APIConnectionError``). Any other client goes through the SDK's ``post``.
"""

from __future__ import annotations

from typing import Any


class Template:
    """What the SDK sends with every streamed ``POST /v1/messages`` of `client`: its URL, headers (all but the
    body's length) and extensions (its timeouts). It keeps no reference to the client (`sdk.post` keeps the
    templates by client, weakly)."""

    def __init__(self, client: Any) -> None:
        from anthropic._models import FinalRequestOptions

        options = FinalRequestOptions.construct(method="post", url="/v1/messages", json_data=None, content=b"{}",
                                                files=None)
        options = client._prepare_options(client._copy_and_prepare(options))
        request = client._build_request(options, retries_taken=0)
        client._prepare_request(request)
        self.method = request.method
        self.url = request.url
        headers = request.headers.copy()
        del headers["content-length"]
        self.headers = headers  # copied by each request (normalized once, here)
        self.extensions = dict(request.extensions)


def direct(client: Any) -> bool:
    """Whether `client`'s requests may be sent from a :class:`Template` (nothing in them can differ). Its tracer
    does not matter: the SDK starts no span for a request that none of its methods made (no span name), as
    ``client.post`` is."""
    import anthropic

    return (type(client) is anthropic.Anthropic and client.max_retries == 0 and not client._middleware
            and client._idempotency_header is None and client.custom_auth is None)


def send(client: Any, template: Template, body: bytes) -> Any:
    """Send `body` as the SDK would send it with `client` (`template`, its own); its stream (an
    ``anthropic.Stream``)."""
    import anthropic
    import httpx2
    from anthropic.types import Message

    request = httpx2.Request(template.method, template.url, headers=template.headers, content=body,
                             extensions=template.extensions)
    try:
        response = client._client.send(request, stream=True)
    except httpx2.TimeoutException as exc:
        raise anthropic.APITimeoutError(request=request) from exc
    except anthropic.AnthropicError:
        raise
    except Exception as exc:
        raise anthropic.APIConnectionError(request=request) from exc
    if not response.is_success:
        try:
            response.read()
        finally:
            response.close()
        raise client._make_status_error_from_response(response) from None
    return anthropic.Stream(cast_to=Message, response=response, client=client)


__all__ = ["Template", "direct", "send"]
