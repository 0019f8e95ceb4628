"""The budget step before each model request (docs/rate-limits.md#budgets): `BudgetGate`, a hook (`engine/hooks.py`).

Every request of a job with a budget — its ticks, its latent calls, the ticks and latent calls of its module
child jobs, which count against the root job's budget — reserves what it may spend in the root job's budget
hash before it is sent (`Store.reserve_budget`, one atomic step, so any number of processes share one budget),
and settles with what it really spent once it ends (`Store.settle_budget`). A reservation is held under the
request's place (`held_as`), not under one attempt's: a process killed with a request in flight never settles
it, and the attempt that takes the request over is granted the same reservation again (not a second one) and
settles it:

- requests: one;
- input tokens: the prompt estimated from the request's size (`agentq.llm.tokens`), cached or not;
- output tokens: the request's `max_tokens`, lowered to what the budget has left (output and cost), so the
  answer cannot cross it; fewer than `MIN_OUTPUT_TOKENS` left refuses the request;
- cost: the estimated prompt at the dearest rate it may be billed at (uncached, or a cache write with the job's
  TTL), plus the output tokens granted at the output rate.

A request that would cross a limit is not sent: the gate raises `BudgetExceeded` naming what ran out, and the
budget stays exceeded (every later reservation is refused), so nothing else of the job reaches the model. The
caller then fails the job (`stop_for_budget`). A request whose model has no price cannot be costed: under
`max_cost_usd` it is refused too.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from agentq.engine.hooks import Hook, ModelRequest, RequestEnded
from agentq.errors import BudgetExceeded
from agentq.llm.base import LLMRequest, Usage
from agentq.llm.prices import NANOS_PER_TOKEN_PER_USD_PER_MTOK, PriceTable
from agentq.llm.tokens import estimate_input_tokens
from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.records import ErrorInfo, JobInfo
from agentq.store.contracts import BudgetStore
from agentq.store.replies import BudgetGranted

log = logging.getLogger("agentq.budget")

MIN_OUTPUT_TOKENS = 256  # a request that could write fewer is not worth sending (a solution needs some room)


class BudgetGate(Hook):
    """Reserves each model request of a job with a budget before it is sent, and settles it after."""

    def __init__(self, store: BudgetStore, prices: PriceTable):
        self.store = store
        self.prices = prices

    def before_request(self, asked: ModelRequest) -> LLMRequest:
        budget = asked.job.job_options.budget
        if budget is None:
            return asked.request
        request = asked.request
        reply = self.store.reserve_budget(asked.job.root_job, held_as(asked), budget=budget,
                                          ask=self.ask(budget, request))
        if isinstance(reply, BudgetGranted):
            return replace(request, max_tokens=reply.output_tokens)
        log.warning("job %s: a model request was not sent: the budget of job %s ran out (%s)", asked.job.id,
                    asked.job.root_job, reply.message)
        raise BudgetExceeded(reply.message)

    def after_request(self, ended: RequestEnded) -> None:
        asked = ended.asked
        if asked.job.job_options.budget is None:
            return
        stopped = getattr(ended.error, "usage", None)  # an answer that could not be used was still paid for
        usage = ended.answer.usage if ended.answer is not None else stopped if isinstance(stopped, Usage) else Usage()
        self.store.settle_budget(asked.job.root_job, held_as(asked), Spend(
            requests=usage.requests, input_tokens=usage.prompt_tokens, output_tokens=usage.output_tokens,
            cost_nanousd=usage.cost_nanousd or 0))

    def ask(self, budget: Budget, request: LLMRequest) -> BudgetAsk:
        """What `request` asks of `budget`: its estimated prompt, its output, their cost at the model's price."""
        tokens = estimate_input_tokens(request)
        least = min(MIN_OUTPUT_TOKENS, request.max_tokens)
        price = self.prices.price(request.model)
        if price is None:
            if budget.max_cost_usd is not None:
                raise BudgetExceeded(f"max_cost_usd: model {request.model!r} has no price, so the cost of its "
                                     "requests cannot be held to the budget (give it one in AGENTQ_LLM_PRICES)")
            return BudgetAsk(tokens, 0, request.max_tokens, least, 0.0)
        rates = price.rates_for(tokens)
        prompt_nanousd = round(tokens * rates.prompt_rate(request.cache_ttl) * NANOS_PER_TOKEN_PER_USD_PER_MTOK)
        return BudgetAsk(tokens, prompt_nanousd, request.max_tokens, least,
                         rates.output * NANOS_PER_TOKEN_PER_USD_PER_MTOK)


def held_as(asked: ModelRequest) -> str:
    """The key a request's reservation is held under: its place, the same for every attempt of the request (a
    tick's exchange number, the call a latent request answers), so the attempt that takes a request over from a
    process killed while it was in flight is granted that process's reservation again instead of holding a second
    one, and its settling gives it back; an attempt's own key only for a request without a place."""
    return asked.place or asked.key


class Finisher(Protocol):
    """What `stop_for_budget` needs of the job-progress step (`JobProgress`)."""

    def finish(self, job_id: str, *, error: ErrorInfo | None = None) -> bool: ...


def stop_for_budget(progress: Finisher, job: JobInfo, error: BudgetExceeded) -> None:
    """A request of `job` was refused by its budget: the root job fails with `BudgetExceeded`, and so does `job`
    when it is a module's child (its parent's call then fails; the parent's own next request is refused)."""
    failure = ErrorInfo("BudgetExceeded", str(error))
    progress.finish(job.root_job, error=failure)
    if job.id != job.root_job:
        progress.finish(job.id, error=failure)


__all__ = ["MIN_OUTPUT_TOKENS", "BudgetGate", "held_as", "stop_for_budget"]
