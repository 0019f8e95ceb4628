"""A job's spending limits and prompt-cache TTL (docs/rate-limits.md#budgets): `options.budget`, `options.cache_ttl`
(pure).

A budget caps what every model request of a job costs together — its agent ticks, its latent calls and the
requests of its module child jobs, which count against the job that started them (the root job). Any subset of
the limits may be given; `{}` sets none. Tokens count every token the model reads (`max_input_tokens`: uncached
input, cache writes and cache reads together) or writes (`max_output_tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentq.errors import Problem

CACHE_TTLS = ("5m", "1h")
DEFAULT_CACHE_TTL = "5m"
NANOS_PER_USD = 1_000_000_000  # spend is counted in integer nano-dollars, so sums are exact across processes


@dataclass(frozen=True, slots=True)
class Budget:
    """What a job (with its latent calls and child jobs) may spend on the model; None: no limit on that."""

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost_usd: float | None = None
    max_requests: int | None = None

    @classmethod
    def of(cls, raw: Any) -> Budget | None:
        """The budget of a stored (valid) `options.budget`; None when there is none or it sets no limit."""
        if not isinstance(raw, Mapping):
            return None
        budget = cls(**{f.name: raw.get(f.name) for f in fields(cls)})
        return None if budget.to_dict() == {} else budget

    def to_dict(self) -> dict[str, Any]:
        """The limits that are set, in `options.budget`'s form."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def max_cost_nanousd(self) -> int | None:
        return None if self.max_cost_usd is None else round(self.max_cost_usd * NANOS_PER_USD)


@dataclass(frozen=True, slots=True)
class BudgetAsk:
    """What one model request asks of a budget before it is sent: its prompt's estimated tokens and their cost
    at the dearest rate they may be billed at, the most it may write (its `max_tokens`), the least worth sending
    it for, and what each output token costs."""

    input_tokens: int
    input_nanousd: int
    output_tokens: int
    min_output_tokens: int
    output_nanousd_per_token: float


@dataclass(frozen=True, slots=True)
class Spend:
    """What a request spent once answered (all zero for one that was not): its prompt's tokens (uncached, cache
    writes and reads), its output tokens, its cost."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nanousd: int = 0


LIMITS = tuple(f.name for f in fields(Budget))
_COUNTS = ("max_input_tokens", "max_output_tokens", "max_requests")


def budget_problems(value: Any, pointer: str) -> list[Problem]:
    """What is wrong with `value` as a budget (`options.budget`, `AGENTQ_DEFAULT_BUDGET`), each problem with its
    JSON pointer under `pointer`; [] when it is valid."""
    if not isinstance(value, Mapping):
        return [Problem(pointer, f"a budget is an object with any of {', '.join(LIMITS)}, got {_kind(value)}")]
    found = (_limit_problem(key, limit) for key, limit in value.items())
    return [Problem(f"{pointer}/{key}", message) for key, message in zip(value, found, strict=True) if message]


def _limit_problem(key: str, limit: Any) -> str | None:
    """What is wrong with one limit of a budget, or None."""
    if key not in LIMITS:
        return f"unknown limit; a budget has {', '.join(LIMITS)}"
    if key in _COUNTS and not (_is_int(limit) and limit >= 0):
        return f"expected an integer >= 0, got {limit!r}"
    if key == "max_cost_usd" and not (_is_number(limit) and math.isfinite(limit) and limit >= 0):
        return f"expected a number of US dollars >= 0, got {limit!r}"
    return None


def cache_ttl_problem(value: Any, pointer: str) -> Problem | None:
    """What is wrong with `value` as `options.cache_ttl`, or None."""
    if value in CACHE_TTLS:
        return None
    return Problem(pointer, f"expected one of {', '.join(repr(t) for t in CACHE_TTLS)}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


__all__ = ["CACHE_TTLS", "DEFAULT_CACHE_TTL", "LIMITS", "NANOS_PER_USD", "Budget", "BudgetAsk", "Spend",
           "budget_problems", "cache_ttl_problem"]
