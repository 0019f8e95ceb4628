"""Fleet-wide model rate limits (docs/rate-limits.md): `AGENTQ_LLM_LIMITS`, what each model may be asked per minute
(pure).

`{"<model>": {"requests_per_minute": N, "input_tokens_per_minute": N, "output_tokens_per_minute": N}}`, any
subset of the three per model; `"*"` holds for every model not named. Each limit is a token bucket shared by the
whole fleet (`store/limits.py`), as the API enforces it: its capacity is the per-minute limit, refilled
continuously. Input tokens are what the API counts against its input limit: uncached input and cache writes, not
cache reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentq.errors import Problem

KINDS = ("requests", "input_tokens", "output_tokens")
"""The three limits of a model, in the order every step of the limiter lists them."""
FIELDS = tuple(f"{kind}_per_minute" for kind in KINDS)
ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's limits per minute (None: not limited by this setting; the API's headers may still teach one)."""

    requests_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None

    def per_minute(self) -> tuple[int | None, int | None, int | None]:
        """The three limits in `KINDS` order."""
        return self.requests_per_minute, self.input_tokens_per_minute, self.output_tokens_per_minute


@dataclass(frozen=True, slots=True)
class LimitAsk:
    """What one model request takes from its model's buckets before it is sent: one request, its estimated
    prompt, its `max_tokens` (given back with what it did not write once it is answered)."""

    requests: int
    input_tokens: int
    output_tokens: int

    def amounts(self) -> tuple[int, int, int]:
        return self.requests, self.input_tokens, self.output_tokens


@dataclass(frozen=True, slots=True)
class Observed:
    """What a request taught about its model, for every process: the amounts to give back (negative: to take
    more) once its real usage is known, the limits and remaining capacity the API's `anthropic-ratelimit-*`
    headers gave (None when absent), and for how long the API asked the fleet to pause (a 429 or 529)."""

    refund: tuple[int, int, int] = (0, 0, 0)
    limits: tuple[int | None, int | None, int | None] = (None, None, None)
    remaining: tuple[int | None, int | None, int | None] = (None, None, None)
    pause_s: float = 0.0

    @property
    def empty(self) -> bool:
        return self == Observed()


def limits_for(limits: Mapping[str, ModelLimits], model: str) -> ModelLimits:
    """The limits of `model`: its own entry, else the `"*"` entry, else none."""
    return limits.get(model) or limits.get(ANY_MODEL) or ModelLimits()


def parse_limits(value: Any) -> dict[str, ModelLimits]:
    """The limits of a valid `AGENTQ_LLM_LIMITS` value (see `limits_problems`)."""
    return {model: ModelLimits(**dict(entry)) for model, entry in value.items()}


def limits_problems(value: Any) -> list[Problem]:
    """What is wrong with `value` as `AGENTQ_LLM_LIMITS`, each problem with its JSON pointer; [] when valid."""
    if not isinstance(value, Mapping):
        return [Problem("", f"expected an object of models, got {_kind(value)}")]
    problems = []
    for model, entry in value.items():
        where = "/" + str(model).replace("~", "~0").replace("/", "~1")
        if not str(model).strip():
            problems.append(Problem(where, "a model's name may not be empty"))
        if not isinstance(entry, Mapping) or not entry:
            problems.append(Problem(where, f"expected an object with any of {', '.join(FIELDS)}, got "
                                           f"{json.dumps(entry) if isinstance(entry, Mapping) else _kind(entry)}"))
            continue
        problems += [Problem(f"{where}/{key}", message) for key, message in
                     ((key, _limit_problem(key, limit)) for key, limit in entry.items()) if message]
    return problems


def _limit_problem(key: str, limit: Any) -> str | None:
    if key not in FIELDS:
        return f"unknown limit; a model has {', '.join(FIELDS)}"
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return f"expected an integer > 0, got {json.dumps(limit)}"
    return None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


__all__ = ["ANY_MODEL", "FIELDS", "KINDS", "LimitAsk", "ModelLimits", "Observed", "limits_for", "limits_problems",
           "parse_limits"]
