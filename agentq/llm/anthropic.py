"""The Anthropic provider: one streamed Messages API request per :class:`LLMRequest`
(docs/protocol.md#what-the-model-is-sent).

Its parts: the request's body (`anthropic_request.py`: the forced ``solution`` tool, cache breakpoints, thinking),
the reading of the answer's raw event stream (`anthropic_stream.py`: calls reported as they complete, thinking
blocks kept byte for byte, the stop reason), and the mapping of every SDK and transport exception into agentq's
errors (`anthropic_errors.py`: transient ones are :class:`LLMRetryableError` with the provider's ``retry-after``).
The SDK's own retries are off by default: the runtime schedules the next attempt without holding a worker slot.

``anthropic`` is imported when the first request is made, never at import time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agentq.llm.anthropic_errors import PROMPT_TOO_LONG, map_error, parse_retry_after, rate_limits_of
from agentq.llm.anthropic_request import cache_control, request_params
from agentq.llm.anthropic_stream import KNOWN_STOP_REASONS, read_answer
from agentq.llm.base import LLMAnswer, LLMRequest, OnCall
from agentq.llm.sdk import Shards, canned_stream, make_client, post, prepare_requests, shard_count

log = logging.getLogger(__name__)

DEFAULT_CONNECTIONS = 100  # the SDK's own number of connections kept alive


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
        self._shards: Shards | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        return self._sharded().client()

    def _sharded(self) -> Shards:
        """The process's client and its copies with pools of their own (`sdk.Shards`; a client given is used as
        it is, by every thread)."""
        if self._shards is None:
            with self._lock:
                if self._shards is None:
                    count = 1 if self._client is not None else shard_count(self.connections)
                    per_copy = -(-self.connections // count)
                    if self._client is None:
                        self._client = make_client(api_key=self.api_key, base_url=self.base_url,
                                                   timeout_s=self.timeout_s, max_retries=self.max_retries,
                                                   connections=per_copy)
                    self._shards = Shards(self._client, count=count, connections=per_copy)
        return self._shards

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        """Stream one answer; ``on_call(index, call)`` runs for each complete ``calls`` element as it arrives."""
        client = self.client
        try:
            stream = post(client, request_params(request))
        except Exception as exc:
            raise map_error(exc) from exc
        try:
            return replace(read_answer(stream, on_call), rate_limits=rate_limits_of(_headers(stream)))
        finally:
            try:
                stream.close()
            except Exception:  # closing a broken connection must not hide the real outcome
                log.debug("closing the Anthropic stream failed", exc_info=True)

    def prepare(self) -> None:
        """Make the client and read one canned answer through the SDK's stream, so that a process about to start
        many requests at once does not have each of them wait on the SDK's import and its types' first build, nor
        on the client's copies being made (each the first time a thread of its share asks for it), nor on their
        request templates (`send.py`)."""
        read_answer(canned_stream(self.client), None)
        shards = self._sharded()
        shards.make_all()
        prepare_requests([self._client, *shards.copies()])

    def close(self) -> None:
        """Release the HTTP connections of the client made by this provider."""
        made = [self._client] + (self._shards.copies() if self._shards is not None else [])
        for client in made:
            if client is None:
                continue
            try:
                client.close()
            except Exception:
                log.debug("closing the Anthropic client failed", exc_info=True)


def _headers(stream: Any) -> Mapping[str, str] | None:
    response = getattr(stream, "response", None)
    return getattr(response, "headers", None)


__all__ = ["KNOWN_STOP_REASONS", "PROMPT_TOO_LONG", "AnthropicLLM", "cache_control",
           "map_error", "parse_retry_after", "request_params"]
