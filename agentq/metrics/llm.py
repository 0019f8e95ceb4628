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
        try:
            answer = self.llm.solve(request, on_call=on_call)
        except Exception as error:
            count_request(self.metrics, request.model, None, error)
            raise
        count_request(self.metrics, request.model, answer, None)
        return answer

    def __getattr__(self, name: str) -> Any:  # anything else of the provider (e.g. a replay's bookkeeping)
        return getattr(self.llm, name)


def count_request(metrics: Metrics, model: str, answer: LLMAnswer | None, error: BaseException | None) -> None:
    """Count one model request of `model` that ended with `answer` (its tokens and cost too) or `error` (a retry
    when it is transient); also what the batch lane's answers are counted with."""
    if answer is None:
        metrics.llm_requests.labels(model, "retry" if isinstance(error, LLMRetryableError) else "error").inc()
        return
    metrics.llm_requests.labels(model, "ok").inc()
    usage = answer.usage
    for kind, count in zip(TOKEN_TYPES, (usage.input_tokens, usage.output_tokens, usage.cache_creation_input_tokens,
                                         usage.cache_read_input_tokens), strict=True):
        if count:
            metrics.llm_tokens.labels(model, kind).inc(count)
    if usage.cost_nanousd:
        metrics.llm_cost.labels(model).inc(usage.cost_nanousd / NANOS_PER_USD)


def metered(llm: LLM | None, metrics: Metrics) -> LLM | None:
    """`llm` counting its requests and tokens into `metrics` (None stays None: no model configured)."""
    return MeteredLLM(llm, metrics) if llm is not None else None
