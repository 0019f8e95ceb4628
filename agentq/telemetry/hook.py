"""Model requests as `chat {model}` spans (the GenAI semantic conventions), and a tick's `invoke_agent` and an
activity's `activity {name}` spans around them, through the engine's hook point.

Installed by the composition root as the last of the executor's hooks, and only while tracing is on: a request a
budget refuses or the rate limits defer is never sent and has no span. The span is a child of the current
context (the tick's `invoke_agent`, a latent call's `execute_tool`) and is not made current, so the calls the
streamed answer sends stay the tick's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from agentq import telemetry
from agentq.engine.hooks import Hook, ModelRequest, RequestEnded
from agentq.llm.base import LLMRequest
from agentq.protocol.records import JobInfo


class TracingHook(Hook):
    """One `chat {model}` span per model request sent; a tick and a handler run inside spans of their own."""

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}  # request key -> its span
        self._lock = threading.Lock()

    def around_tick(self, info: JobInfo, n: int) -> AbstractContextManager[Any]:
        return telemetry.tick_span(info, n)

    def around_activity(self, name: str, call: Mapping[str, Any],
                        tool: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return telemetry.activity_span(name, call, tool)

    def before_request(self, asked: ModelRequest) -> LLMRequest:
        request = asked.request
        span = telemetry.start_span(f"chat {request.model}", {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": telemetry.PROVIDER_NAME,
            "gen_ai.request.model": request.model, "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.conversation.id": asked.job.id, "agentq.job.id": asked.job.id,
            "agentq.request.purpose": request.purpose}, client=True)
        if span is not None:
            with self._lock:
                self._open[asked.key] = span
        return request

    def after_request(self, ended: RequestEnded) -> None:
        with self._lock:
            span = self._open.pop(ended.asked.key, None)
        if span is None:
            return
        answer = ended.answer
        if answer is not None:
            usage = answer.usage
            span.set_attributes({
                "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
                "gen_ai.response.finish_reasons": [answer.stop_reason or "unknown"],
            })
            if answer.tool_use_id:
                span.set_attribute("agentq.response.tool_use_id", answer.tool_use_id)
        if ended.error is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", type(ended.error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(ended.error)[:200]))
        span.end()
