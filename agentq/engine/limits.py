"""The fleet-wide rate limits step before each model request (docs/rate-limits.md): `ModelLimiter`, a hook
(`engine/hooks.py`) installed after the budget's (`engine/budget.py`): a request its budget refuses takes nothing from
the limits.

Every request takes its share of its model's buckets in the store, for every process of the fleet at once
(`LimitStore.take_model_request`: one atomic step): one request, its prompt estimated from its size
(`agentq.llm.tokens`), its `max_tokens`. The limits are the fleet's `llm_limits` (`agentq config`, seeded from
`AGENTQ_LLM_LIMITS`, read once per heartbeat), lowered to the account's own as the API's `anthropic-ratelimit-*`
headers give them (or those alone for a model with none configured).

A request that must wait is not sent and holds no slot: the gate raises `ModelDeferred` with the wait, its tick or
call goes back to the broker with that countdown, and it keeps its place (the share it took waits for it under its
`place`; requests that come later wait behind it). Once answered, it gives back what it did not use (its
`max_tokens` beyond what it wrote, its estimated prompt beyond what the API counted: uncached input and cache
writes) and what the headers said (`LimitStore.settle_model_request`). A 429 or 529 pauses the model for the whole fleet
for its `retry-after` (or `DEFAULT_PAUSE_S`), not only for the process that got it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from agentq.engine.hooks import Hook, ModelRequest, RequestEnded
from agentq.errors import LLMRetryableError, ModelDeferred
from agentq.llm.base import LLMAnswer, LLMRequest, RateLimits
from agentq.llm.tokens import estimate_input_tokens
from agentq.protocol.limits import LimitAsk, ModelLimits, Observed, limits_for
from agentq.store.contracts import LimitStore
from agentq.store.replies import LimitWait

log = logging.getLogger("agentq.limits")

PAUSE_STATUSES = frozenset({429, 529})  # rate limited, overloaded: the model pauses for the fleet
DEFAULT_PAUSE_S = 1.0  # a 429 or 529 without `retry-after`


class ModelLimiter(Hook):
    """Holds every model request of the process to its model's fleet-wide rate limits (see the module)."""

    def __init__(self, store: LimitStore, limits: Mapping[str, ModelLimits] | Callable[[], Mapping[str, ModelLimits]]):
        self.store = store
        # the fleet's limits as read now (`agentq config`: they change while the process runs), or fixed ones
        self._limits = limits if callable(limits) else lambda fixed=dict(limits): fixed
        self._learned: set[str] = set()  # models whose responses said something of their limits
        self._input_limited: set[str] = set()  # models whose responses gave an input-token limit (estimate them)
        self._estimated: dict[str, int] = {}  # request key -> the prompt it took, until it ends
        self._lock = threading.Lock()

    @property
    def limits(self) -> Mapping[str, ModelLimits]:
        return self._limits()

    def before_request(self, asked: ModelRequest) -> LLMRequest:
        request = asked.request
        if asked.batch:  # the Message Batches API has limits of its own, not these buckets
            return request
        limits = limits_for(self.limits, request.model)
        ask = self.ask(limits, request)
        starting = asked.starting if asked.starting is not None and not asked.starting.written else None
        reply = self.store.take_model_request(
            request.model, asked.place, limits, ask,
            started=(starting.job_id, starting.envelopes) if starting is not None else None)
        if isinstance(reply, LimitWait):
            wait_s = reply.wait_ms / 1000
            log.info("job %s: a request to %s waits %.1f s for the fleet's rate limits", asked.job.id,
                     request.model, wait_s)
            raise ModelDeferred(f"model {request.model} is at its rate limits: the request goes in {wait_s:.1f} s",
                                retry_after_s=wait_s)
        if starting is not None and reply.started:  # its start is written: one round trip fewer per request
            starting.written = True
        with self._lock:
            self._estimated[asked.key] = ask.input_tokens
        return request

    def after_request(self, ended: RequestEnded) -> None:
        request = ended.asked.request
        if ended.asked.batch:
            return
        with self._lock:
            estimated = self._estimated.pop(ended.asked.key, 0)
        observed = self.observed(request, ended, estimated)
        limits = limits_for(self.limits, request.model)
        with self._lock:
            if observed.limits != (None, None, None) or observed.remaining != (None, None, None):
                self._learned.add(request.model)
            if observed.limits[1] is not None:
                self._input_limited.add(request.model)
            limited = request.model in self._learned or limits != ModelLimits()
        if observed.pause_s > 0 or (limited and not observed.empty):  # else nothing in the store would change
            self.store.settle_model_request(request.model, limits, observed)

    def ask(self, limits: ModelLimits, request: LLMRequest) -> LimitAsk:
        """What `request` takes: one request, its estimated prompt (only estimated when an input limit is known:
        the estimate reads the whole request), its `max_tokens`."""
        return LimitAsk(1, self._estimate(limits, request), request.max_tokens)

    def observed(self, request: LLMRequest, ended: RequestEnded, estimated: int) -> Observed:
        """What a request that ended (having taken `estimated` prompt tokens) teaches the fleet: what to give
        back, the headers' limits, a pause."""
        error, answer = ended.error, ended.answer
        said = answer.rate_limits if answer is not None else getattr(error, "rate_limits", None)
        limits, remaining = (said.limits, said.remaining) if isinstance(said, RateLimits) else ((None,) * 3,) * 2
        pause = 0.0
        if isinstance(error, LLMRetryableError) and error.status in PAUSE_STATUSES:
            pause = error.retry_after_s if error.retry_after_s is not None else DEFAULT_PAUSE_S
            log.warning("model %s answered %s: every request of the fleet to it pauses %.1f s", request.model,
                        error.status, pause)
        return Observed(refund=_refund(request, answer, estimated, refused=pause > 0), limits=limits,
                        remaining=remaining, pause_s=pause)

    def _estimate(self, limits: ModelLimits, request: LLMRequest) -> int:
        if limits.input_tokens_per_minute is None:
            with self._lock:
                if request.model not in self._input_limited:
                    return 0
        return estimate_input_tokens(request)


def _refund(request: LLMRequest, answer: LLMAnswer | None, estimated: int, *, refused: bool) -> tuple[int, int, int]:
    """What a request took and did not use: all its tokens when the API refused it (a 429 or 529), its `max_tokens`
    when it failed before an answer, else what it neither wrote nor was counted for reading."""
    if answer is None:
        return 0, estimated if refused else 0, request.max_tokens
    usage = answer.usage
    counted = usage.input_tokens + usage.cache_creation_input_tokens  # cache reads count against no limit
    return 0, estimated - counted if estimated else 0, request.max_tokens - usage.output_tokens


__all__ = ["DEFAULT_PAUSE_S", "ModelLimiter"]
