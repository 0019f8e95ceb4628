"""The provider interface of agentq's LLM layer: a request, its answer, its usage.

The engine decides *what* to ask (``agentq.protocol.conversation`` builds the system texts, the turns and
the solution schema); a provider only talks to a model and streams the answer back. Every request forces
one tool, ``solution``, whose input is the answer (SPEC §13).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from agentq.protocol.conversation import SOLUTION_TOOL_DESCRIPTION, SOLUTION_TOOL_NAME

OnCall = Callable[[int, dict], None]
"""``on_call(index, call)``: one complete element of the solution's ``calls`` array, reported mid-stream."""


@dataclass(frozen=True)
class Usage:
    """Token usage of one or more requests (SPEC §13); ``a + b`` sums, ``to_dict()`` is the job record's form."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: object) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        """The usage in ``data`` (a job record's ``usage``); unknown keys are ignored, missing ones are 0."""
        data = data or {}
        return cls(**{f.name: int(data.get(f.name) or 0) for f in fields(cls)})


@dataclass(frozen=True)
class LLMRequest:
    """One model request. ``messages`` are Anthropic-format turns, append-only across the ticks of a job."""

    model: str
    system: tuple[str, ...]
    messages: tuple[dict, ...]
    solution_schema: dict
    max_tokens: int
    purpose: str = "tick"  # "tick" | "latent" | "module": for replay keys, metrics and logs


@dataclass(frozen=True)
class LLMAnswer:
    """The model's solution: ``solution`` is the parsed tool input, ``None`` when ``raw`` is not valid JSON."""

    solution: Any
    raw: str
    tool_use_id: str
    usage: Usage
    stop_reason: str | None


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
    "Usage",
]
