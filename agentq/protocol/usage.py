"""A job's usage: the counters the store sums, and the job record's `usage` built from them (pure).

The store keeps flat integer counters (`usage.<counter>` fields of the job hash, summed with HINCRBY by any
process): the token counters of docs/protocol.md#what-the-model-is-sent, the cost in nano-dollars (`cost_nanousd`, exact
sums), the requests no price covered (`unpriced_requests`), and each of them again per model as `<counter>|<model>`. The
record shows them as docs/rate-limits.md says:

    {"requests", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
     "cost_usd", "by_model": {"<model>": {the same counters, "cost_usd"}}}

`cost_usd` is null when some request of the job (or of that model) had no price: a partial sum would look like
the whole bill. Requests of the batch lane (`options.priority: "batch"`) are counted in the totals at their batch
price and again as `"batch": {"requests", "cost_usd"}` (in the totals and per model), so the record says which
part of the bill went through the Message Batches API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.protocol.budgets import NANOS_PER_USD

TOKEN_COUNTERS = ("requests", "input_tokens", "output_tokens", "cache_creation_input_tokens",
                  "cache_read_input_tokens")
SAVED = "context_tokens_saved"  # about how many input tokens compaction kept out of the job's requests
COST = "cost_nanousd"
UNPRICED = "unpriced_requests"
BATCH_REQUESTS = "batch_requests"  # requests answered through the Message Batches API
BATCH_COST = "batch_cost_nanousd"  # what they cost (at the batch price)
_SEPARATOR = "|"  # `<counter>|<model>`: counter names have no `|`, model names may have anything after it


def request_counters(model: str, tokens: Mapping[str, int], cost_nanousd: int | None, *,
                     batch: bool = False) -> dict[str, int]:
    """The counters one answered request adds to its job: the totals and its model's. `cost_nanousd` None:
    no price covered the request; `batch`: it went through the Message Batches API."""
    own = {name: int(tokens.get(name) or 0) for name in TOKEN_COUNTERS}
    own[COST] = cost_nanousd or 0
    own[UNPRICED] = 1 if cost_nanousd is None else 0
    if batch:
        own[BATCH_REQUESTS] = int(tokens.get("requests") or 1)
        own[BATCH_COST] = cost_nanousd or 0
    return {**own, **{f"{name}{_SEPARATOR}{model}": count for name, count in own.items()}}


def saved_counters(model: str, saved: int) -> dict[str, int]:
    """The counters of the tokens compaction kept out of one request (none when it kept nothing)."""
    return {SAVED: saved, f"{SAVED}{_SEPARATOR}{model}": saved} if saved > 0 else {}


def usage_record(counters: Mapping[str, int]) -> dict[str, Any]:
    """The job record's `usage` of the stored counters."""
    totals: dict[str, int] = {}
    models: dict[str, dict[str, int]] = {}
    for field, count in counters.items():
        name, _, model = field.partition(_SEPARATOR)
        (models.setdefault(model, {}) if model else totals)[name] = int(count)
    record = _shown(totals)
    record["by_model"] = {model: _shown(own) for model, own in sorted(models.items())}
    return record


def record_counters(usage: Mapping[str, Any]) -> dict[str, int]:
    """The counters of a job record's `usage` (a module child's, added to its parent's)."""
    counters = {name: int(usage.get(name) or 0) for name in (*TOKEN_COUNTERS, SAVED)}
    counters[COST] = counters[UNPRICED] = 0
    for model, own in (usage.get("by_model") or {}).items():
        cost = own.get("cost_usd")
        mine = {name: int(own.get(name) or 0) for name in (*TOKEN_COUNTERS, SAVED)}
        mine[COST] = round(cost * NANOS_PER_USD) if cost is not None else 0
        mine[UNPRICED] = 0 if cost is not None else mine["requests"]
        counters[COST] += mine[COST]
        counters[UNPRICED] += mine[UNPRICED]
        _add_batch(counters, mine, own.get("batch"))
        counters.update({f"{name}{_SEPARATOR}{model}": count for name, count in mine.items()})
    return counters


def _add_batch(counters: dict[str, int], mine: dict[str, int], batch: Any) -> None:
    """A model's batch-lane counters (its usage's `batch`), into its own and the totals."""
    if not isinstance(batch, Mapping) or not batch.get("requests"):
        return
    mine[BATCH_REQUESTS] = int(batch["requests"])
    mine[BATCH_COST] = round((batch.get("cost_usd") or 0) * NANOS_PER_USD)
    for name in (BATCH_REQUESTS, BATCH_COST):
        counters[name] = counters.get(name, 0) + mine[name]


def empty_usage() -> dict[str, Any]:
    """The usage of a job that made no model request."""
    return usage_record({})


def cost_usd(nanousd: int) -> float:
    return round(nanousd / NANOS_PER_USD, 9)


def _shown(counters: Mapping[str, int]) -> dict[str, Any]:
    shown: dict[str, Any] = {name: int(counters.get(name) or 0) for name in TOKEN_COUNTERS}
    shown["cost_usd"] = None if counters.get(UNPRICED) else cost_usd(int(counters.get(COST) or 0))
    if counters.get(SAVED):  # only for jobs whose conversation was compacted
        shown[SAVED] = int(counters[SAVED])
    if counters.get(BATCH_REQUESTS):  # only for jobs with requests of the batch lane
        shown["batch"] = {"requests": int(counters[BATCH_REQUESTS]),
                          "cost_usd": None if counters.get(UNPRICED) else cost_usd(int(counters.get(BATCH_COST) or 0))}
    return shown


__all__ = ["BATCH_COST", "BATCH_REQUESTS", "COST", "SAVED", "TOKEN_COUNTERS", "UNPRICED", "cost_usd", "empty_usage",
           "record_counters", "request_counters", "saved_counters", "usage_record"]
