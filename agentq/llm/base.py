"""The provider interface of agentq's LLM layer: a request, its answer, its usage.

The engine decides *what* to ask (``agentq.protocol.conversation`` builds the system texts, the turns and
the solution schema); a provider only talks to a model and streams the answer back. Every request forces
one tool, ``solution``, whose input is the answer (docs/protocol.md#what-the-model-is-sent); with thinking on, the tool
is offered, not forced (docs/rate-limits.md), and an answer may come without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from agentq.protocol.budgets import DEFAULT_CACHE_TTL
from agentq.protocol.instructions import SOLUTION_TOOL_DESCRIPTION, SOLUTION_TOOL_NAME
from agentq.protocol.usage import TOKEN_COUNTERS, request_counters

OnCall = Callable[[int, dict], None]
"""``on_call(index, call)``: one complete element of the solution's ``calls`` array, reported mid-stream."""


@dataclass(frozen=True)
class Usage:
    """Token usage of one or more requests (docs/protocol.md#what-the-model-is-sent); ``a + b`` sums, ``to_dict()`` is
    docs/protocol.md#what-the-model-is-sent's form.

    ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens`` split ``cache_creation_input_tokens`` by TTL when
    the API reported the split (both 0 otherwise). ``cost_nanousd`` is the cost in nano-dollars once a price
    table priced it (`agentq.llm.prices`), None while unpriced (a sum with an unpriced part is unpriced).
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    batch_requests: int = 0  # of `requests`, those answered through the Message Batches API (the batch lane)
    cost_nanousd: int | None = None

    def __add__(self, other: object) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        counts = {name: getattr(self, name) + getattr(other, name) for name in _COUNTS}
        cost = None if self.cost_nanousd is None or other.cost_nanousd is None \
            else self.cost_nanousd + other.cost_nanousd
        return Usage(**counts, cost_nanousd=cost)

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in TOKEN_COUNTERS}

    def recorded(self) -> dict[str, int]:
        """`to_dict()` with the cache writes' split by TTL when there is one (a replay file's `usage`)."""
        split = {name: getattr(self, name) for name in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")}
        return {**self.to_dict(), **{name: count for name, count in split.items() if count}}

    @property
    def prompt_tokens(self) -> int:
        """Every input token the model read: uncached, written to the cache, read from it."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def counters(self, model: str) -> dict[str, int]:
        """The counters this request's usage adds to its job's (`agentq.protocol.usage`)."""
        return request_counters(model, self.to_dict(), self.cost_nanousd, batch=self.batch_requests > 0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        """The usage in ``data`` (a job record's ``usage``); unknown keys are ignored, missing ones are 0."""
        data = data or {}
        return cls(**{name: int(data.get(name) or 0) for name in _COUNTS})


_COUNTS = tuple(f.name for f in fields(Usage) if f.name != "cost_nanousd")


@dataclass(frozen=True)
class LLMRequest:
    """One model request. ``messages`` are Anthropic-format turns, append-only across the ticks of a job."""

    model: str
    system: tuple[str, ...]
    messages: tuple[dict, ...]
    solution_schema: dict
    max_tokens: int
    purpose: str = "tick"  # "tick" | "latent" | "module": for replay keys, metrics and logs
    cache_ttl: str = DEFAULT_CACHE_TTL  # the TTL of every prompt-cache breakpoint: "5m" or "1h"
    thinking: Mapping[str, Any] | None = None  # the API's `thinking` ({"type": "enabled", "budget_tokens": N} or
    # {"type": "adaptive"}); None: off, and the solution tool is forced


@dataclass(frozen=True)
class LLMAnswer:
    """The model's solution: ``solution`` is the parsed tool input, ``None`` when ``raw`` is not valid JSON;
    ``rate_limits``: what the response said of the account's rate limits, when it said anything.

    ``tool_use_id`` is "" when the model answered without calling the solution tool (possible with thinking on);
    ``text`` is what it wrote outside the tool. ``blocks`` are its ``thinking`` and ``redacted_thinking`` blocks,
    exactly as they came (signatures included): they go back to the model unchanged (docs/rate-limits.md).
    ``stop_reason == "max_tokens"`` (``truncated``): the answer was cut; ``raw`` holds what came of it."""

    solution: Any
    raw: str
    tool_use_id: str
    usage: Usage
    stop_reason: str | None
    rate_limits: RateLimits | None = None
    blocks: tuple[dict, ...] = ()
    text: str = ""

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "max_tokens"

    @property
    def thinking(self) -> tuple[str, ...]:
        """The summaries of the answer's thinking blocks that have one (a redacted block has none)."""
        return tuple(str(b["thinking"]) for b in self.blocks if b.get("type") == "thinking" and b.get("thinking"))


@dataclass(frozen=True)
class RateLimits:
    """What a response said of the account's rate limits for its model (Anthropic's `anthropic-ratelimit-*`
    headers): per kind of `agentq.protocol.limits.KINDS` (requests, input tokens, output tokens), the limit per
    minute and what remains of it (None: not said)."""

    limits: tuple[int | None, int | None, int | None]
    remaining: tuple[int | None, int | None, int | None]


class LLM(Protocol):
    """A model provider. ``solve`` streams one answer and reports each complete call through ``on_call``.

    Raises :class:`agentq.errors.LLMRetryableError` for transient failures (the caller schedules another
    attempt) and :class:`agentq.errors.LLMError` for terminal ones; nothing else escapes from the provider.
    """

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer: ...


__all__ = [
    "LLM",
    "SOLUTION_TOOL_DESCRIPTION",
    "SOLUTION_TOOL_NAME",
    "LLMAnswer",
    "LLMRequest",
    "OnCall",
    "RateLimits",
    "Usage",
]
