"""The Message Batches API side of the batch lane (`engine/batch.py`): a request as a batch entry, the SDK's
`client.messages.batches.*`, and a batch result turned into agentq's answer or error.

A batch entry is `{"custom_id", "params"}`: `params` is the streamed request's body (`request_params`) without
`stream` (the API refuses it inside a batch) and without `eager_input_streaming` (nothing streams). `custom_id`
must match `^[a-zA-Z0-9_-]{1,64}$` and be unique within its batch: it is derived from the request's place (the
same request on every attempt) and its send, so a request sent again after an expired batch gets a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agentq.errors import LLMError, LLMRetryableError
from agentq.llm.anthropic_errors import map_error
from agentq.llm.anthropic_request import request_params
from agentq.llm.anthropic_stream import check_stop
from agentq.llm.base import SOLUTION_TOOL_NAME, LLMAnswer, LLMRequest, Usage

MAX_BATCH_REQUESTS = 100_000  # the API's limits of one batch
MAX_BATCH_BYTES = 256_000_000
RETRYABLE_ERRORS = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})


def custom_id(place: str, tries: int = 0) -> str:
    """The custom_id of a request (its `place`) on its send number `tries`: 40 hex digits, within the API's
    pattern, the same on every dispatcher."""
    return "aq" + hashlib.sha1(f"{place}\x00{tries}".encode()).hexdigest()[:40]


def batch_params(request: LLMRequest) -> dict[str, Any]:
    """The Messages API body of `request` as a batch entry's `params`."""
    params = request_params(request)
    params.pop("stream", None)
    params["tools"] = [{k: v for k, v in tool.items() if k != "eager_input_streaming"} for tool in params["tools"]]
    return params


@dataclass(frozen=True)
class BatchState:
    """What the API says of a batch: `processing_status` (in_progress, canceling, ended) and its counts."""

    id: str
    status: str
    counts: dict[str, int]

    @property
    def ended(self) -> bool:
        return self.status == "ended"


class BatchClient:
    """The SDK's `client.messages.batches` for the lane (`client`: an `anthropic.Anthropic`)."""

    def __init__(self, client: Any):
        self.client = client

    def create(self, entries: list[dict[str, Any]]) -> str:
        """Send a batch of `{"custom_id", "params"}` entries; its id. Raises `LLMError` (retryable or not)."""
        try:
            return str(self.client.messages.batches.create(requests=entries).id)
        except Exception as exc:
            raise map_error(exc) from exc

    def retrieve(self, batch_id: str) -> BatchState:
        try:
            batch = self.client.messages.batches.retrieve(batch_id)
        except Exception as exc:
            raise map_error(exc) from exc
        counts = batch.request_counts
        return BatchState(batch.id, batch.processing_status,
                          {name: int(getattr(counts, name, 0) or 0)
                           for name in ("processing", "succeeded", "errored", "canceled", "expired")})

    def results(self, batch_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(custom_id, result as JSON) of every request of an ended batch (the results' JSONL, streamed)."""
        try:
            for line in self.client.messages.batches.results(batch_id):
                yield line.custom_id, line.result.model_dump(mode="json", exclude_none=True)
        except Exception as exc:
            raise map_error(exc) from exc

    def cancel(self, batch_id: str) -> None:
        try:
            self.client.messages.batches.cancel(batch_id)
        except Exception as exc:
            raise map_error(exc) from exc


def answer_of(result: dict[str, Any]) -> LLMAnswer:
    """agentq's answer of a batch result (`{"type": "succeeded", "message": {...}}`), or the error it stands for:
    `LLMRetryableError` for an expired or canceled request and a transient error (the lane sends it again),
    `LLMError` for a request the API refused, and what a streamed answer's stop reason raises (a refusal, a full
    context window, an unknown reason)."""
    kind = result.get("type")
    if kind == "succeeded":
        return _message_answer(result.get("message") or {})
    if kind == "errored":
        error = (result.get("error") or {}).get("error") or result.get("error") or {}
        text = f"Anthropic batch request errored: {error.get('type')}: {error.get('message')}"
        raise LLMRetryableError(text) if error.get("type") in RETRYABLE_ERRORS else LLMError(text)
    if kind in ("expired", "canceled"):
        raise LLMRetryableError(f"the Anthropic batch request was {kind} before it was processed")
    raise LLMError(f"the Anthropic batch answered an unknown result type {kind!r}")


def _usage(message: dict[str, Any]) -> Usage:
    """A message's usage (the cache writes split by TTL when the API split them)."""
    usage = message.get("usage") or {}
    split = usage.get("cache_creation") or {}
    counts = {name: int(usage.get(name) or 0) for name in ("input_tokens", "output_tokens",
                                                           "cache_creation_input_tokens", "cache_read_input_tokens")}
    return Usage(requests=1, **counts, ephemeral_5m_input_tokens=int(split.get("ephemeral_5m_input_tokens") or 0),
                 ephemeral_1h_input_tokens=int(split.get("ephemeral_1h_input_tokens") or 0))


def _message_answer(message: dict[str, Any]) -> LLMAnswer:
    """A batch's message as a streamed answer would have come (`anthropic_stream.read_answer`): its stop reason
    checked, its thinking blocks kept as they came (they go back to the model unchanged), no solution when it
    called no tool."""
    spent = _usage(message)
    stop_reason = message.get("stop_reason")
    text, blocks, tool = _content(message)
    check_stop(stop_reason, text, spent)
    if tool is None:  # no solution (thinking on): the engine sends it back, as a streamed one
        return LLMAnswer(solution=None, raw="", tool_use_id="", usage=spent, stop_reason=stop_reason, blocks=blocks,
                         text=text)
    solution = tool.get("input")
    return LLMAnswer(solution=solution, raw=json.dumps(solution, ensure_ascii=False), tool_use_id=str(tool.get("id")),
                     usage=spent, stop_reason=stop_reason, blocks=blocks, text=text)


def _content(message: dict[str, Any]) -> tuple[str, tuple[dict, ...], dict | None]:
    """A message's text, its thinking blocks, and its solution tool_use block (None: none)."""
    text, blocks, tool = "", [], None
    for block in message.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text += str(block.get("text") or "")
        elif kind in ("thinking", "redacted_thinking"):
            blocks.append(block)
        elif kind == "tool_use" and tool is None and block.get("name") == SOLUTION_TOOL_NAME:
            tool = block
    return text, tuple(blocks), tool


__all__ = ["MAX_BATCH_BYTES", "MAX_BATCH_REQUESTS", "BatchClient", "BatchState", "answer_of", "batch_params",
           "custom_id"]
