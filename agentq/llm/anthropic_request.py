"""The Anthropic provider's request: the Messages API body of one :class:`LLMRequest`
(docs/protocol.md#what-the-model-is-sent).

The request forces the one ``solution`` tool (``eager_input_streaming``, cached) and sends the system texts as
blocks with ``cache_control`` on the last one. With thinking on (``LLMRequest.thinking``) the tool is offered
instead (``tool_choice: auto``: the API refuses a forced tool with thinking).
"""

from __future__ import annotations

from typing import Any

from agentq.llm.base import SOLUTION_TOOL_DESCRIPTION, SOLUTION_TOOL_NAME, LLMRequest
from agentq.protocol.thinking import fitted


def request_params(request: LLMRequest) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.create`` for ``request`` (the JSON body,
    docs/protocol.md#what-the-model-is-sent). Every cache breakpoint carries the request's TTL (``options.cache_ttl``,
    docs/rate-limits.md), always explicit."""
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
    if thinking:  # the API refuses a forced tool with thinking: the tool is offered (docs/rate-limits.md)
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
