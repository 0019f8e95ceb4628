"""`MeteredLLM`: a provider wrapper that counts each model request (by model and outcome) and its tokens."""

from __future__ import annotations

from typing import Any

from agentq.errors import LLMRetryableError
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.metrics.counters import LLM_REQUESTS, LLM_TOKENS, TOKEN_TYPES


class MeteredLLM:
    """An `LLM` that counts each request (by model and outcome) and its tokens (by type)."""

    def __init__(self, llm: LLM):
        self.llm = llm

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        try:
            answer = self.llm.solve(request, on_call=on_call)
        except LLMRetryableError:
            LLM_REQUESTS.labels(request.model, "retry").inc()
            raise
        except Exception:
            LLM_REQUESTS.labels(request.model, "error").inc()
            raise
        LLM_REQUESTS.labels(request.model, "ok").inc()
        usage = answer.usage
        for kind, count in zip(TOKEN_TYPES, (usage.input_tokens, usage.output_tokens,
                                             usage.cache_creation_input_tokens, usage.cache_read_input_tokens),
                               strict=True):
            if count:
                LLM_TOKENS.labels(request.model, kind).inc(count)
        return answer

    def __getattr__(self, name: str) -> Any:  # anything else of the provider (e.g. a replay's bookkeeping)
        return getattr(self.llm, name)


def metered(llm: LLM | None) -> LLM | None:
    return MeteredLLM(llm) if llm is not None else None
