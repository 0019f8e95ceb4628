"""`MeteredLLM`: a provider wrapper that counts each model request (by model and outcome), its tokens and its
cost (when a price table priced it, `agentq.llm.prices`)."""

from __future__ import annotations

from typing import Any

from agentq.errors import LLMRetryableError
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.metrics.counters import TOKEN_TYPES, Metrics
from agentq.protocol.budgets import NANOS_PER_USD


class MeteredLLM:
    """An `LLM` that counts each request (by model and outcome), its tokens (by type) and its cost into
    `metrics`."""

    def __init__(self, llm: LLM, metrics: Metrics):
        self.llm = llm
        self.metrics = metrics

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        requests = self.metrics.llm_requests
        try:
            answer = self.llm.solve(request, on_call=on_call)
        except LLMRetryableError:
            requests.labels(request.model, "retry").inc()
            raise
        except Exception:
            requests.labels(request.model, "error").inc()
            raise
        requests.labels(request.model, "ok").inc()
        usage = answer.usage
        for kind, count in zip(TOKEN_TYPES, (usage.input_tokens, usage.output_tokens,
                                             usage.cache_creation_input_tokens, usage.cache_read_input_tokens),
                               strict=True):
            if count:
                self.metrics.llm_tokens.labels(request.model, kind).inc(count)
        if usage.cost_nanousd:
            self.metrics.llm_cost.labels(request.model).inc(usage.cost_nanousd / NANOS_PER_USD)
        return answer

    def __getattr__(self, name: str) -> Any:  # anything else of the provider (e.g. a replay's bookkeeping)
        return getattr(self.llm, name)


def metered(llm: LLM | None, metrics: Metrics) -> LLM | None:
    """`llm` counting its requests and tokens into `metrics` (None stays None: no model configured)."""
    return MeteredLLM(llm, metrics) if llm is not None else None
