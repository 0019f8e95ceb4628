"""Reading the Anthropic provider's answer from the raw event stream of one Messages API request.

The tool input's ``input_json_delta`` pieces go through a :class:`CallReporter`, so each complete element of
``calls`` is reported while the model is still writing the rest. With thinking on, the answer's ``thinking`` /
``redacted_thinking`` blocks (``thinking_delta`` and ``signature_delta`` pieces) are kept exactly as they came, to
go back unchanged. The stop reason decides what the answer is (docs/protocol.md#thinking-and-stop-reasons):
``max_tokens`` a cut one (``LLMAnswer.truncated``), ``refusal`` a :class:`ModelRefused` with the model's text,
``model_context_window_exceeded`` a :class:`ContextWindowExceeded`, any reason not in :data:`KNOWN_STOP_REASONS`
an :class:`UnknownStopReason`. An error in the middle of the stream is mapped by `anthropic_errors.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agentq.errors import ContextWindowExceeded, LLMRetryableError, ModelRefused, UnknownStopReason
from agentq.llm.anthropic_errors import map_error
from agentq.llm.base import SOLUTION_TOOL_NAME, LLMAnswer, OnCall, Usage
from agentq.llm.scanner import CallReporter
from agentq.llm.sdk import events


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
"""The stop reasons agentq acts on (docs/protocol.md#thinking-and-stop-reasons); any other is an
:class:`UnknownStopReason`."""


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


def read_answer(stream: Any, on_call: OnCall | None) -> LLMAnswer:
    state = _StreamState(on_call)
    for event in _events(stream):
        state.handle(event)  # on_call's own exceptions propagate unchanged
    if not state.stopped:
        raise LLMRetryableError("the Anthropic stream ended before message_stop")
    usage = Usage(requests=1, **state.usage)
    check_stop(state.stop_reason, state.text(), usage)
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


def check_stop(stop_reason: str | None, text: str, usage: Usage) -> None:
    """Raise for a stop reason whose answer cannot be used (docs/protocol.md#thinking-and-stop-reasons): a refusal (with
    the model's text), a full context window, a reason agentq does not know. No stop reason at all is taken as the end
    of the answer."""
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
